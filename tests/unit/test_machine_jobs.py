"""This machine's job registry (``LAMBDAML_HOME/jobs``) and its workers' kept lines, and the commands reading them."""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lambdaml import cli
from lambdaml.errors import ConfigError
from lambdaml.local.services import free_port
from lambdaml.runtime.job_logs import LogReader, WorkerLog
from lambdaml.runtime.machine_jobs import MachineRegistry, _process_token
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.registry import JobRecord


def record(job_id: str, **fields: Any) -> JobRecord:
    return JobRecord(
        **{"job_id": job_id, "state": "running", "attempt": 1, "created_at": 100.0, "updated_at": 100.0, **fields}
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    return tmp_path


def test_jobs_are_listed_newest_first_by_their_start(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = MachineRegistry()
    for job_id, created in (("b-mid", 200.0), ("a-old", 100.0), ("d-new", 300.0), ("c-mid", 200.0)):
        registry.save(record(job_id, created_at=created, updated_at=created + 5, state="succeeded"))
    assert [job.job_id for job in registry.newest_jobs()] == ["d-new", "c-mid", "b-mid", "a-old"]
    assert [r.job_id for r in registry.newest_first()] == ["d-new", "c-mid", "b-mid", "a-old"]

    assert cli.main(["jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"jobs run on this machine ({home}/jobs):"
    assert [line.split()[0] for line in lines if line.split() and line.split()[0][1:2] == "-"] == [
        "d-new", "c-mid", "b-mid", "a-old",
    ]  # fmt: skip
    assert cli.main(["jobs", "--state", "failed"]) == 0
    assert capsys.readouterr().out.strip() == f"no jobs failed run on this machine ({home}/jobs)"


def test_no_jobs_says_where_it_looked(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["jobs"]) == 0
    assert capsys.readouterr().out.strip() == f"no jobs run on this machine ({home}/jobs)"
    assert not (home / "jobs").exists()  # looking writes nothing


def test_the_record_follows_the_buckets_rules(tmp_path: Path) -> None:
    registry = MachineRegistry(tmp_path)
    registry.save(record("j", attempt=2, created_at=50.0, updated_at=300.0))
    registry.save(record("j", attempt=1, state="failed", updated_at=400.0))  # an older attempt
    assert (registry.job("j").record.attempt, registry.job("j").record.state) == (2, "running")  # type: ignore[union-attr]
    registry.save(record("j", attempt=2, state="failed", created_at=500.0, updated_at=310.0, error="worker 1: x"))
    registry.save(record("j", attempt=2, state="interrupted", updated_at=320.0))  # the first ending stands
    job = registry.job("j")
    assert job is not None and (job.record.state, job.record.error) == ("failed", "worker 1: x")
    assert job.record.created_at == 50.0  # when the job first started, whatever an attempt says
    registry.save(record("j", attempt=2, state="cancelled", updated_at=330.0))  # a cancel overrides a failure
    registry.save(record("j", attempt=2, state="running", updated_at=340.0))
    assert registry.job("j").record.state == "cancelled"  # type: ignore[union-attr]


def _write_many(root: str, writer: int, rounds: int) -> None:
    """One of several processes writing at once: its own job, and (every writer) one shared job."""
    registry = MachineRegistry(Path(root))
    for i in range(rounds):
        registry.save(record(f"own-{writer}", updated_at=100.0 + i))
        if writer % 2:
            registry.describe("shared", dataset=f"d-{writer}-{i}")  # details alone
        else:
            attempt = 1 + i // 10
            registry.save(record("shared", attempt=attempt, updated_at=1000.0 * attempt + 10 * i + writer))


def test_concurrent_writers_lose_nothing_and_never_leave_half_a_record(tmp_path: Path) -> None:
    writers, rounds = 4, 40
    context = mp.get_context("spawn")
    processes = [context.Process(target=_write_many, args=(str(tmp_path), w, rounds)) for w in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    registry = MachineRegistry(tmp_path)
    jobs = {job.job_id: job for job in registry.jobs()}
    assert registry.refused == [] and sorted(jobs) == ["own-0", "own-1", "own-2", "own-3", "shared"]
    assert all(jobs[f"own-{w}"].record.updated_at == 100.0 + rounds - 1 for w in range(writers))
    shared = jobs["shared"]
    last_attempt = 1 + (rounds - 1) // 10
    newest = max(1000.0 * last_attempt + 10 * (rounds - 1) + w for w in (0, 2))
    assert (shared.record.attempt, shared.record.updated_at) == (last_attempt, newest)
    assert shared.dataset in {f"d-{w}-{rounds - 1}" for w in (1, 3)}  # the details survived the records' writes
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "a JSON object, not list"),
        ('{"job_id": "bad", "attempt": 1, "updated_at": 5}', "no 'state'"),
        ('{"job_id": "bad", "state": "running", "updated_at": "soon"}', "could not convert"),
    ],
)
def test_a_malformed_record_is_refused_in_one_line(
    home: Path, text: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = MachineRegistry()
    registry.save(record("good", state="succeeded", updated_at=105.0))
    (home / "jobs" / "bad").mkdir()
    (home / "jobs" / "bad" / "record.json").write_text(text)
    with pytest.raises(ConfigError) as refused:
        registry.job("bad")
    message = str(refused.value)
    assert message.startswith(f"{home}/jobs/bad/record.json is not a job record: ") and why in message
    assert "\n" not in message
    assert [job.job_id for job in registry.jobs()] == ["good"] and registry.refused == [message]

    assert cli.main(["jobs"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"warning: {message}; left out"]
    assert "good" in captured.out and "bad" not in captured.out
    assert cli.main(["status", "bad"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"error: {message}"]


def test_watching_an_ended_job_shows_it_once_and_exits_by_how_it_ended(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registry = MachineRegistry()
    registry.save(record("done", state="succeeded", updated_at=150.0, cost_dollars=0.25))
    registry.save(record("broke", state="failed", updated_at=150.0, error="worker 1: diverged"))
    assert cli.main(["status", "done", "--watch", "--output", "json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["state"] == "succeeded" and json.loads(line)["cost_dollars"] == 0.25
    assert cli.main(["status", "broke", "--watch"]) == 1
    assert (
        capsys.readouterr().out.splitlines()[0]
        == f"job broke on this machine ({home}/jobs/broke): failed (worker 1: diverged)"
    )


def test_a_job_id_that_is_not_a_name_is_refused_before_any_path_is_built(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "../../etc"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: invalid job id '../../etc'")


def _running_record(home: Path, job_id: str, **details: Any) -> None:
    registry = MachineRegistry()
    registry.save(record(job_id, created_at=1000.0, updated_at=1000.0, workers=2))
    pid = os.getpid()
    fields: dict[str, Any] = {
        "backend": "local",
        "epochs": 5,
        "timeout_s": 1.0,
        "pid": pid,
        "host": socket.gethostname(),
        "process": _process_token(pid),
        "storage": {"bucket": "gone", "endpoint_url": f"http://127.0.0.1:{free_port()}", "region": "us-east-1"},
    }
    registry.describe(job_id, **{**fields, **details})


def test_a_job_whose_process_is_gone_was_interrupted(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _running_record(home, "orphan", pid=int(ended.stdout), process=None)
    job = MachineRegistry().job("orphan")
    assert job is not None and job.record.state == "interrupted" and job.stored_state == "running"
    assert job.record.error == f"its process {int(ended.stdout)} on this machine ended without recording how"
    assert cli.main(["cancel", "orphan"]) == 0
    # Its store is gone too: this machine's record is the one left to say it was cancelled.
    assert capsys.readouterr().out.strip() == f"job orphan on this machine: cancelled (its process {job.pid} had gone)"
    assert MachineRegistry().job("orphan").record.state == "cancelled"  # type: ignore[union-attr]
    assert cli.main(["cancel", "orphan"]) == 0
    assert capsys.readouterr().out.strip() == "job orphan on this machine has ended (cancelled); nothing to cancel"

    _running_record(home, "alive")  # this very process
    assert MachineRegistry().job("alive").record.state == "running"  # type: ignore[union-attr]
    _running_record(home, "elsewhere", host="another-host", pid=1)
    assert MachineRegistry().job("elsewhere").record.state == "running"  # type: ignore[union-attr]  # cannot tell
    assert cli.main(["attach", "elsewhere"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: job elsewhere runs on another-host, not on this machine; attach to it there"
    ]


def test_a_running_job_whose_store_is_gone_says_so_in_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _running_record(home, "stranded")
    assert cli.main(["status", "stranded"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"job stranded on this machine ({home}/jobs/stranded): running"
    assert (
        out[-1].startswith("  no heartbeats: its store s3://gone/ at http://127.0.0.1:")
        and "does not answer" in out[-1]
    )

    assert cli.main(["cancel", "stranded"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "its store s3://gone/ at http://127.0.0.1:" in err[0], err
    assert err[0].endswith(f"stop it with Ctrl-C where it runs (process {os.getpid()})")
    assert MachineRegistry().job("stranded").record.state == "running"  # type: ignore[union-attr]  # nothing cancelled


def test_kept_lines_come_whole_by_time_and_a_torn_one_waits(tmp_path: Path) -> None:
    (tmp_path / "rank-0.jsonl").write_text(
        '{"at_ms": 30, "attempt": 1, "level": "INFO", "message": "zero late"}\n'
        '{"at_ms": 10, "attempt": 1, "level": "INFO", "message": "zero early"}\n'
        "not json at all\n"
    )
    (tmp_path / "rank-1.jsonl").write_text(
        '{"at_ms": 20, "attempt": 1, "level": "INFO", "message": "one"}\n{"at_ms": 40'
    )
    reader = LogReader(tmp_path)
    lines = reader.new_lines()
    assert [(line.at_ms, line.rank, line.message) for line in lines] == [
        (10, 0, "zero early"), (20, 1, "one"), (30, 0, "zero late"),
    ]  # fmt: skip
    assert len({line.event_id for line in lines}) == 3
    assert reader.new_lines() == []
    with (tmp_path / "rank-1.jsonl").open("a") as out:
        out.write(', "attempt": 2, "level": "ERROR", "message": "finished", "epoch": {"epoch": 3, "loss": 0.5, '
                  '"elapsed_s": 1.5}}\n')  # fmt: skip
    (late,) = reader.new_lines()
    assert (late.at_ms, late.attempt, late.level, late.message) == (40, 2, "ERROR", "finished")
    assert late.epoch == {"epoch": 3.0, "loss": 0.5, "elapsed_s": 1.5}


def test_a_worker_thread_keeps_its_own_lines_only(home: Path) -> None:
    attempt = Attempt("threaded", 1, "v1", 100.0)
    logger = logging.getLogger("lambdaml.test_worker")
    root = logging.getLogger()
    handlers_before = list(root.handlers)

    def worker() -> None:
        worker_log = WorkerLog.open(attempt, 3, epochs=2, whole_process=False)
        logger.warning("from the worker")
        other = threading.Thread(target=lambda: logger.warning("from another thread"))
        other.start()
        other.join()
        worker_log.epoch(1, 0.25, 0.5)
        worker_log.close()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    logger.warning("after the worker")
    assert root.handlers == handlers_before
    kept = [json.loads(line) for line in (home / "jobs" / "threaded" / "rank-3.jsonl").read_text().splitlines()]
    assert [(k["level"], k["message"]) for k in kept] == [
        ("INFO", "lambdaml job threaded rank 3 attempt 1"),
        ("WARNING", "lambdaml.test_worker: from the worker"),
        ("INFO", "epoch 1/2 loss 0.25000 0.50s"),
    ]
    assert kept[2]["epoch"] == {"epoch": 1, "loss": 0.25, "elapsed_s": 0.5}
