"""Jobs run on this machine, found by ``jobs``, ``status``, ``logs``, ``attach`` and ``cancel`` without flags.

Every command runs as a user runs it, in a process of its own, with ``HOME`` and
``LAMBDAML_HOME`` fresh, no AWS variable, and a socket guard: a connection (or a name lookup)
to anything outside 127.0.0.0/8 is refused and written down, even where the code catches the
refusal; each test asserts the guard wrote nothing. One test shows the guard does catch one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml.config import StorageSpec
from tests.helpers import small_dataset_bucket, unique_name

#: Run as ``python -c GUARD lambdaml ARGS...``: the command, with every connection and name
#: lookup outside the loopback network refused and appended to $GUARD_LOG.
GUARD = textwrap.dedent(
    """
    import ipaddress, os, socket, sys

    def _loopback(host):
        host = str(host).split("%")[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def _refuse(what, target):
        with open(os.environ["GUARD_LOG"], "a") as log:
            log.write(f"{what} {target!r}\\n")
        raise OSError(f"socket guard: {what} {target!r} is outside 127.0.0.0/8")

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    _getaddrinfo, _create_connection = socket.getaddrinfo, socket.create_connection

    def _inet(sock, address):
        return sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0])

    def connect(self, address):
        if _inet(self, address):
            _refuse("connect", address)
        return _connect(self, address)

    def connect_ex(self, address):
        if _inet(self, address):
            _refuse("connect_ex", address)
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not _loopback(host):
            _refuse("getaddrinfo", host)
        return _getaddrinfo(host, *args, **kwargs)

    def create_connection(address, *args, **kwargs):
        if not _loopback(address[0]):
            _refuse("create_connection", address)
        return _create_connection(address, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.getaddrinfo, socket.create_connection = getaddrinfo, create_connection

    from lambdaml.cli import main

    sys.argv = sys.argv[1:]
    sys.exit(main())
    """
)


class Machine:
    """A fresh user of this machine: their HOME and LAMBDAML_HOME, and no AWS settings at all."""

    def __init__(self, root: Path) -> None:
        self.home, self.lambdaml_home, self.cwd = root / "home", root / "lambdaml-home", root / "work"
        for folder in (self.home, self.lambdaml_home, self.cwd):
            folder.mkdir(parents=True)
        self.guard_log = root / "guard.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env.update(HOME=str(self.home), LAMBDAML_HOME=str(self.lambdaml_home), GUARD_LOG=str(self.guard_log))

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """A command, unguarded (``train``, ``demo``: they reach their loopback stores)."""
        return subprocess.run(
            [sys.executable, "-m", "lambdaml", *args],
            capture_output=True, text=True, timeout=timeout, cwd=self.cwd, env=self.env,
        )  # fmt: skip

    def guarded(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.guarded_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=self.cwd, env=self.env
        )

    def guarded_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-c", GUARD, "lambdaml", *args]

    def attempts(self) -> list[str]:
        """What the guard refused, in every guarded command so far."""
        return self.guard_log.read_text().splitlines() if self.guard_log.exists() else []


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


@pytest.fixture(scope="module")
def storage(moto_url: str) -> StorageSpec:
    """A moto bucket holding a small dataset."""
    return small_dataset_bucket(moto_url)


def job_file(machine: Machine, storage: StorageSpec, *, epochs: int = 1) -> Path:
    job: dict[str, Any] = {
        "name": "here",
        "workers": 2,
        "dataset": "small",
        "storage": storage.model_dump(),
        "channel": {"kind": "s3", "bucket": unique_name("comm"), "endpoint_url": storage.endpoint_url},
        "algorithm": {"name": "ga_sgd", "epochs": epochs, "batch_size": 50},
        "sync": {"timeout_s": 20},
    }
    path = machine.cwd / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def train(machine: Machine, storage: StorageSpec) -> str:
    """Train a tiny job here; its id."""
    done = machine.run("train", str(job_file(machine, storage)), "--output", "json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["job_id"])


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def assert_ended_job_found(machine: Machine, job_id: str, result_file: Path) -> None:
    """``jobs``, ``status``, ``logs``, ``cancel`` and ``attach`` of a job that succeeded here, without its store."""
    folder = f"{machine.lambdaml_home}/jobs"

    listed = machine.guarded("jobs")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"jobs run on this machine ({folder}):"
    assert [line.split()[:3] for line in lines if line.startswith(job_id)] == [[job_id, "succeeded", "1"]]
    as_json = machine.guarded("jobs", "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    (summary,) = json.loads(as_json.stdout)
    assert (summary["job_id"], summary["backend"], summary["workers"]) == (job_id, "local", 2)
    assert summary["result_path"] == str(result_file.resolve()) and summary["cost_dollars"] > 0

    status = machine.guarded("status", job_id)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == f"job {job_id} on this machine ({folder}/{job_id}): succeeded"
    assert f"result  {result_file.resolve()}" in status.stdout and "local backend, 2 workers" in status.stdout

    logs = machine.guarded("logs", job_id)
    assert logs.returncode == 0, logs.stderr
    printed = logs.stdout.splitlines()
    assert printed[0] == f"job {job_id}'s worker lines, kept on this machine ({folder}/{job_id}):"
    for rank in (0, 1):
        mine = [line.split(None, 3)[3] for line in printed[1:] if line.split()[1:3] == ["rank", str(rank)]]
        assert mine[0] == f"lambdaml job {job_id} rank {rank} attempt 1", printed
        assert any(line.startswith("epoch 1/1 loss ") for line in mine), printed
    one_rank = machine.guarded("logs", job_id, "--rank", "1", "--output", "json")
    assert one_rank.returncode == 0, one_rank.stderr
    assert {json.loads(line)["rank"] for line in one_rank.stdout.splitlines()} == {1}

    cancel = machine.guarded("cancel", job_id)
    assert cancel.returncode == 0, cancel.stderr  # nothing left running, as asked
    assert cancel.stdout.strip() == f"job {job_id} on this machine has ended (succeeded); nothing to cancel"

    attach = machine.guarded("attach", job_id, "--output", "json")
    assert attach.returncode == 0, attach.stderr
    assert json.loads(attach.stdout)["job_id"] == job_id  # its result, kept here, as train printed it

    unknown = machine.guarded("status", "no-such-job")
    assert unknown.returncode == 1
    assert one_line(unknown) == (
        f"error: no job 'no-such-job' among the jobs run on this machine ({folder}); for a stack's job add --stack NAME"
    )
    assert machine.attempts() == []


def test_a_job_trained_here_is_found_with_no_flags_and_no_network(machine: Machine, storage: StorageSpec) -> None:
    job_id = train(machine, storage)
    assert_ended_job_found(machine, job_id, machine.cwd / "results" / f"{job_id}.json")


def test_the_demo_job_is_found_after_its_embedded_store_is_gone(machine: Machine) -> None:
    demo = machine.run("demo", "--rows", "2000", "--epochs", "1", "--workers", "2")
    assert demo.returncode == 0, demo.stderr
    (result_file,) = (machine.cwd / "results").glob("*.json")
    assert_ended_job_found(machine, result_file.stem, result_file)


def test_the_guard_sees_a_command_that_asks_aws(machine: Machine) -> None:
    """A region asks for a bucket on AWS: the guard refuses and records the request."""
    asked = machine.guarded("jobs", "--region", "eu-west-1")
    assert asked.returncode == 1
    one_line(asked)
    assert machine.attempts(), "the guard recorded nothing"


@pytest.fixture
def running(machine: Machine, storage: StorageSpec) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A job that trains for far longer than the test (its id, its ``train`` process), seen past its second epoch."""
    path = job_file(machine, storage, epochs=100_000)
    trainer = subprocess.Popen(
        [sys.executable, "-m", "lambdaml", "train", str(path), "--job-id", "long-job"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=machine.cwd, env=machine.env,
    )  # fmt: skip
    try:
        folder = machine.lambdaml_home / "jobs" / "long-job"
        deadline = time.monotonic() + 120
        while not all(_epochs_logged(folder, rank) >= 2 for rank in (0, 1)):  # so both have beaten once
            assert trainer.poll() is None, trainer.communicate()
            assert time.monotonic() < deadline, "the job logged no second epoch in 120s"
            time.sleep(0.2)
        yield "long-job", trainer
    finally:
        if trainer.poll() is None:
            trainer.kill()
        trainer.communicate()


def _epochs_logged(folder: Path, rank: int) -> int:
    path = folder / f"rank-{rank}.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"epoch": {' in line)


def test_a_running_job_here_is_followed_watched_and_cancelled(
    machine: Machine, running: tuple[str, subprocess.Popen[str]]
) -> None:
    job_id, trainer = running
    status = machine.guarded("status", job_id, "--output", "json")
    assert status.returncode == 0, status.stderr
    seen = json.loads(status.stdout)
    assert seen["state"] == "running" and seen["pid"] == trainer.pid
    assert sorted(beat["rank"] for beat in seen["heartbeats"]) == [0, 1]
    listed = machine.guarded("jobs", "--state", "running", "--output", "json")
    assert [job["job_id"] for job in json.loads(listed.stdout)] == [job_id]

    # Followers from other terminals, started before the cancel: each ends when the job does.
    attach = subprocess.Popen(
        machine.guarded_argv("attach", job_id), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=machine.cwd, env=machine.env,
    )  # fmt: skip
    follow = subprocess.Popen(
        machine.guarded_argv("logs", job_id, "--follow", "--rank", "0"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=machine.cwd, env=machine.env,
    )  # fmt: skip
    _wait_for_line(attach, "attached to long-job")
    _wait_for_line(attach, "  epoch ")  # an epoch that ended after it attached, as train prints it

    cancel = machine.guarded("cancel", job_id)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.strip() == f"job {job_id} on this machine: cancelled; its workers stop at their next heartbeat"

    _, trained_err = trainer.communicate(timeout=120)
    assert trainer.returncode == 1 and "cancelled" in trained_err
    _, attached_err = attach.communicate(timeout=60)
    assert attach.returncode == 1 and attached_err.strip() == f"error: job {job_id} cancelled", attached_err
    followed_out, followed_err = follow.communicate(timeout=60)
    assert follow.returncode == 0, followed_err
    assert f"lambdaml job {job_id} rank 0 attempt 1" in followed_out and "rank   1" not in followed_out

    ended = machine.guarded("status", job_id)
    assert ended.returncode == 0 and ended.stdout.splitlines()[0].endswith(": cancelled"), ended.stdout
    again = machine.guarded("cancel", job_id)
    assert again.returncode == 0 and "has ended (cancelled); nothing to cancel" in again.stdout
    assert machine.attempts() == []


def _wait_for_line(process: subprocess.Popen[str], text: str) -> None:
    """Read a process's stdout until a line holding ``text`` (bounded: the process ends, or 60s)."""
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if text in line:
            return
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"no line with {text!r}: {process.communicate()}")
