"""Ctrl-C on a local ``train``, pressed as a user presses it: in a terminal, whose driver sends
SIGINT to every process in the foreground group, the worker processes included.

The command must end with one line (what stopped, and the ``--resume`` that continues it) and
exit 130, with no traceback from any process; the resumed job then ends with the model the
same job makes uninterrupted. Real parts throughout: a pseudo-terminal, moto's S3, Redis.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml import keys, settings
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.runtime import records
from lambdaml.storage import get_json
from tests.helpers import Services, unique_name
from tests.proc_tree import children_of, descendants_of

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 6
#: Only a guard against a hang: the tests wait for what the command prints, never for a time.
HANG_S = 120.0
#: What a terminal reads in a command's output: a control sequence (CSI, OSC or a short escape),
#: a carriage return, a new line, or a run of text.
EPOCH_LINE = re.compile(rf"\s*epoch\s+(\d+)/{EPOCHS}\s+loss\s+[\d.]+\s+[\d.]+s")
TOKEN = re.compile(r"\x1b\[([0-?]*)[ -/]*([@-~])|\x1b\][^\x07]*\x07|\x1b[@-_]|(\r)|(\n)|([^\x1b\r\n]+)")


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands' record of the jobs they ran goes to this test's folder, not the user's."""
    monkeypatch.setenv(settings.ENV_HOME, str(tmp_path / "home"))


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    # Many small rounds: each epoch takes long enough that Ctrl-C lands well inside the job.
    X, y, _ = synthetic.higgs_like(20_000, seed=3)
    shards.prepare(data_store[1], "interrupt", X, y, shards=2)
    return data_store


def job_file(tmp_path: Path, storage: StorageSpec, services: Services) -> Path:
    job: dict[str, Any] = {
        "name": "calm",
        "workers": 2,
        "dataset": "interrupt",
        "storage": storage.model_dump(),
        "channel": {"kind": "redis", "port": services.redis_port},
        "algorithm": {"name": "ga_sgd", "epochs": EPOCHS, "batch_size": 10, "lr": 0.1},
        "sync": {"timeout_s": 30, "pattern": "allreduce"},
        "runtime": {"checkpoint_every": 50},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def lambdaml(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=HANG_S, cwd=ROOT
    )


def screen(raw: bytes) -> list[str]:
    """The lines a terminal shows once it has read ``raw``, as far as the codes a live progress line
    uses go (carriage return, new line, cursor up and down, erasing a line); colours and the like
    change no text. Blank lines are left out."""
    lines, row, col = [""], 0, 0
    for match in TOKEN.finditer(raw.decode(errors="replace")):
        params, final, cr, nl, text = match.groups()
        if text:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + text + line[col + len(text) :]
            col += len(text)
        elif cr:
            col = 0
        elif nl:
            row += 1
        elif final in ("A", "B"):
            n = int(params or 1)
            row = max(0, row - n) if final == "A" else row + n
        elif final == "K":
            lines[row] = "" if params == "2" else lines[row][:col] if params in ("", "0") else lines[row][col:]
        elif final == "G":
            col = int(params or 1) - 1
        lines += [""] * (row + 1 - len(lines))
    return [line.rstrip() for line in lines if line.strip()]


class Terminal:
    """A command run in a fresh session whose controlling terminal is a pseudo-terminal."""

    def __init__(self, argv: list[str]) -> None:
        self.output = b""
        pid, self.master = pty.fork()
        if pid == 0:  # the child: no echo (the "^C" a terminal shows is not the command's), then the command
            try:
                attrs = termios.tcgetattr(0)
                attrs[3] &= ~termios.ECHO
                termios.tcsetattr(0, termios.TCSANOW, attrs)
                os.chdir(ROOT)
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        self.pid = pid
        self.deadline = time.monotonic() + HANG_S
        self.status: int | None = None

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is None:  # a failed test: leave nothing of the command running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self.master)

    def read_until(self, pattern: str) -> None:
        """Read what the command prints until ``pattern`` shows on the screen, or it exits."""
        while not re.search(pattern, "\n".join(screen(self.output))):
            if not self._read():
                raise AssertionError(f"the command ended before {pattern!r}:\n{self.output.decode(errors='replace')}")

    def press_ctrl_c(self) -> None:
        # The terminal driver turns it into SIGINT for the whole foreground process group.
        os.write(self.master, b"\x03")

    def wait(self) -> int:
        """Read to the end of its output, then its exit status."""
        while self._read():
            pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.master)
        self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def _read(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"hung for {HANG_S:g}s:\n{self.output.decode(errors='replace')}")
        ready, _, _ = select.select([self.master], [], [], min(remaining, 1.0))
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal has exited
            return False
        self.output += chunk
        return bool(chunk)


def ctrl_c_after_the_first_epoch(argv: list[str], job_id: str) -> tuple[int, str]:
    """Run a ``train`` in a terminal and press Ctrl-C once its first epoch's line shows: mid-job, five
    epochs to go. Returns its exit status and the last line on the screen, having checked that the
    lines above it are the job's header and its epochs' lines, each once and in order (a live
    progress line may go), that no process printed a traceback, and that every process the
    command had started is gone."""
    with Terminal(argv) as terminal:
        terminal.read_until(rf"epoch\s+1/{EPOCHS}\s+loss")
        started = descendants_of(terminal.pid)
        terminal.press_ctrl_c()
        status = terminal.wait()
    *kept, line = screen(terminal.output)
    header, *epochs = kept
    assert header.startswith(f"job {job_id}: training"), kept
    numbers = [int(m.group(1)) if (m := EPOCH_LINE.fullmatch(e)) else None for e in epochs]
    assert numbers == list(range(1, len(epochs) + 1)) and epochs, "\n".join(kept)
    assert b"Traceback" not in terminal.output and b"KeyboardInterrupt" not in terminal.output
    assert len(started) >= 2, started  # the workers (and for torchrun, its ranks)
    assert_gone(started)
    return status, line


def test_ctrl_c_on_a_local_train_is_one_line_and_exit_130_and_resume_ends_with_the_uninterrupted_model(
    tmp_path: Path, storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    path = str(job_file(tmp_path, spec, services))
    job_id = unique_name("calm")
    argv = [sys.executable, "-m", "lambdaml", "train", path, "--job-id", job_id, "--results-dir", str(tmp_path)]

    status, line = ctrl_c_after_the_first_epoch(argv, job_id)
    assert status == 130
    assert line.startswith(f"interrupted: job {job_id} stopped") and f"lambdaml train {path} --resume {job_id}" in line
    assert get_json(store, keys.job_status(job_id))["state"] == records.INTERRUPTED
    assert not store.get_many([keys.job_model(job_id)]), "an interrupted job left a model"

    resumed = lambdaml("train", path, "--resume", job_id, "--results-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    assert records.read_attempt(store, job_id, 2).resume is not None, "the resumed job started over"

    whole_id = unique_name("whole")
    whole = lambdaml("train", path, "--job-id", whole_id, "--results-dir", str(tmp_path))
    assert whole.returncode == 0, whole.stderr
    assert store.get(keys.job_model(job_id)) == store.get(keys.job_model(whole_id))


def test_ctrl_c_on_an_iaas_local_train_is_one_line_and_exit_130(
    tmp_path: Path, storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    """torchrun and its ranks never see Ctrl-C: the command stops them."""
    spec, store = storage
    path = str(job_file(tmp_path, spec, services))
    job_id = unique_name("calm-iaas")
    argv = [sys.executable, "-m", "lambdaml", "train", path, "--backend", "iaas-local", "--job-id", job_id]
    status, line = ctrl_c_after_the_first_epoch([*argv, "--results-dir", str(tmp_path)], job_id)
    assert status == 130
    assert line.startswith(f"interrupted: job {job_id} stopped") and f"--resume {job_id}" in line
    assert get_json(store, keys.job_status(job_id))["state"] == records.INTERRUPTED


def test_the_workers_of_an_interrupted_train_are_gone(
    tmp_path: Path, storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    """Workers ignore Ctrl-C; their parent stops them, and they end with it even if it is killed."""
    spec, _ = storage
    path = str(job_file(tmp_path, spec, services))
    argv = [sys.executable, "-m", "lambdaml", "train", path, "--results-dir", str(tmp_path)]
    with Terminal(argv) as terminal:
        terminal.read_until(rf"epoch\s+1/{EPOCHS}\s+loss")
        workers = children_of(terminal.pid)
        assert len(workers) >= 2, workers
        os.kill(terminal.pid, signal.SIGKILL)  # no chance to stop them: they must see their parent go
        terminal.wait()
    assert_gone(workers)


def assert_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + HANG_S
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and not zombie(pid)]
        time.sleep(0.1)
    assert not alive, f"processes {alive} outlived the command that started them"


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
