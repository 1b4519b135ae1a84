"""What a followed job prints while it runs: every epoch's line once and in order, whatever beats a
follower missed; the progress line's rounds, rate, time left and cost; plain lines off a terminal."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from rich.console import Console

from lambdaml import keys
from lambdaml.backends import JobEvent, StepEvent
from lambdaml.backends.stack_watch import HeartbeatReader
from lambdaml.channels.memory import MemoryChannel
from lambdaml.cli.progress import JobProgress, progress_of
from lambdaml.config import parse_job
from lambdaml.runtime.heartbeat import HISTORY, Heartbeat, at_most_every
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.results import run_time_cost


def plain_console() -> tuple[Console, io.StringIO]:
    """A console that is not a terminal (CI, a pipe), printing into a buffer."""
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200, highlight=False, markup=False, emoji=False), out


def epoch_lines(text: str) -> list[int]:
    return [int(line.split()[1].split("/")[0]) for line in text.splitlines() if line.startswith("  epoch ")]


def beat(rank: int, epochs: list[int], *, step: int = 0, steps: int = 4) -> dict[str, Any]:
    """A heartbeat record as a worker writes it: its epochs so far, and its steps in the next one."""
    return {
        "rank": rank,
        "epoch": epochs[-1] if epochs else 0,
        "loss": 1.0 / epochs[-1] if epochs else None,
        "elapsed_s": float(epochs[-1]) if epochs else None,
        "step": step,
        "steps": steps,
        "epochs": [[e, 1.0 / e, float(e)] for e in epochs],
        "invocation": 1,
        "state": "running",
        "at": 0.0,
    }


def test_every_epoch_is_printed_once_in_order_though_the_polls_skip_epochs() -> None:
    console, out = plain_console()
    shown = JobProgress(12, console=console)
    reader = HeartbeatReader()
    # What a follower polling every half second sees of a job whose epochs end several to a beat:
    # rank 0's record went from epoch 2 to 5 to 6 to 8 between polls, rank 1 lags; a poll repeats one.
    polls = [
        [beat(0, [1, 2]), beat(1, [1])],
        [beat(0, list(range(1, 6))), beat(1, [1, 2, 3])],
        [beat(0, list(range(1, 6))), beat(1, [1, 2, 3])],
        [beat(0, list(range(1, 7)), step=2), beat(1, list(range(1, 7)))],
        [beat(0, list(range(1, 9))), beat(1, list(range(1, 8)))],
        [beat(0, list(range(1, 13))), beat(1, list(range(1, 13)))],
    ]
    for heartbeats in polls:
        epochs, steps = reader.read(heartbeats)
        for event in epochs:
            shown.epoch(event)
        for step in steps:
            shown.steps(step)
    assert epoch_lines(out.getvalue()) == list(range(1, 13))
    assert "  epoch   5/12  loss 0.20000     5.00s" in out.getvalue()


def test_a_record_from_before_records_kept_their_epochs_still_reports_its_latest() -> None:
    reader = HeartbeatReader()
    old = {"rank": 0, "epoch": 3, "loss": 0.5, "elapsed_s": 2.0, "invocation": 1, "state": "running", "at": 1.0}
    epochs, steps = reader.read([old])
    assert epochs == [JobEvent(0, 3, 0.5, 2.0)] and steps == []
    assert reader.read([old]) == ([], [])


def test_epoch_events_of_other_ranks_or_seen_before_print_nothing() -> None:
    console, out = plain_console()
    shown = JobProgress(3, console=console)
    for event in (
        JobEvent(1, 1, 0.9, 1.0),
        JobEvent(0, 1, 0.8, 1.0),
        JobEvent(0, 1, 0.8, 1.0),
        JobEvent(0, 2, 0.7, 2.0),
    ):
        shown.epoch(event)
    assert epoch_lines(out.getvalue()) == [1, 2]


def test_a_resumed_job_prints_its_epochs_from_where_they_stopped() -> None:
    console, out = plain_console()
    shown = JobProgress(5, console=console)
    for epoch in (3, 4, 5):  # the workers' first epoch of the attempt is the 3rd
        shown.epoch(JobEvent(0, epoch, 0.5, 10.0 * epoch))
    assert epoch_lines(out.getvalue()) == [3, 4, 5]


def test_the_progress_line_tells_rounds_rate_time_left_loss_and_cost() -> None:
    now = [1000.0]
    console, _ = plain_console()
    shown = JobProgress(2, started_at=990.0, cost_s=lambda s: s * 0.0001, console=console, clock=lambda: now[0])
    assert shown.line() == "  epoch 1/2  waiting for the workers' first rounds  ~$0.001000 so far (est.)"
    shown.steps(StepEvent(0, 0, 100, 400))
    shown.steps(StepEvent(1, 0, 90, 400))  # the least advanced rank is where the job is
    now[0] += 10.0
    shown.steps(StepEvent(0, 0, 300, 400))
    shown.steps(StepEvent(1, 0, 290, 400))
    shown.epoch(JobEvent(1, 1, 0.6, 19.0))  # rank 1 ended the epoch: rank 0, at 300, is where the job is
    assert shown.line() == "  epoch 1/2  round 300/800  20.0 rounds/s  ETA 25.0s  ~$0.002000 so far (est.)"
    now[0] += 6.0
    shown.epoch(JobEvent(0, 1, 0.5, 20.0))
    shown.steps(StepEvent(1, 1, 20, 400))
    line = shown.line()
    assert line.startswith("  epoch 2/2  round 400/800  ") and "loss 0.50000" in line and "ETA" in line


def test_no_cost_where_none_is_priced() -> None:
    console, _ = plain_console()
    shown = JobProgress(1, console=console, cost_s=lambda s: None)
    assert "$" not in shown.line()


def test_the_cost_so_far_is_the_workers_gb_seconds_or_the_instances() -> None:
    job = parse_job(
        {"dataset": "d", "workers": 4, "runtime": {"memory_mb": 2048}, "iaas": {"instance_type": "c5.large"}}
    )
    lambda_cost = run_time_cost(job, 10.0, "lambda")
    assert lambda_cost == pytest.approx(10 * 4 * 2.0 * 0.0000166667, rel=1e-3)  # GB-seconds at x86's price
    assert run_time_cost(job, 10.0, "local") == lambda_cost  # priced as Lambda would bill it
    assert run_time_cost(job, 10.0, "iaas-local") == pytest.approx(4 * 60 * 0.085 / 3600, rel=1e-2)  # 1 min minimum
    line = progress_of(job, "local", started_at=time.time() - 10).line()
    assert "so far (est.)" in line


def test_off_a_terminal_a_plain_line_comes_when_nothing_was_printed_for_a_while() -> None:
    console, out = plain_console()
    with JobProgress(1, console=console, plain_every_s=0.2) as shown:
        shown.steps(StepEvent(0, 0, 5, 10))
        deadline = time.monotonic() + 10
        while "round 5/10" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "  epoch 1/1  round 5/10" in out.getvalue()


def test_quiet_shows_nothing() -> None:
    console, out = plain_console()
    console.quiet = True
    with JobProgress(1, console=console, plain_every_s=0.05) as shown:
        assert shown._ticker is None and shown._live is None
        shown.epoch(JobEvent(0, 1, 0.5, 1.0))
        time.sleep(0.2)
    assert out.getvalue() == ""


def test_on_a_terminal_the_live_line_goes_and_the_epoch_lines_stay() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, highlight=False, markup=False, emoji=False)
    with JobProgress(2, console=console) as shown:
        assert shown._live is not None and shown._ticker is None
        shown.steps(StepEvent(0, 0, 3, 4))
        shown.epoch(JobEvent(0, 1, 0.5, 1.0))
        shown.epoch(JobEvent(0, 2, 0.25, 2.0))
    text = out.getvalue()
    assert "  epoch   1/2  loss 0.50000" in text and "  epoch   2/2  loss 0.25000" in text
    assert text.index("epoch   1/2") < text.index("epoch   2/2")


# --- what the workers report -------------------------------------------------------


def _attempt() -> Attempt:
    return Attempt(job_id="beat-job", number=1, dataset_version="v1", started_at=time.time())


def test_a_heartbeat_record_keeps_every_epoch_so_far_though_beats_are_skipped() -> None:
    store = MemoryChannel()
    attempt = _attempt()
    now = [attempt.started_at + 0.1]
    beat = Heartbeat(store, attempt, every_s=1.0, final_epoch=6, clock=lambda: now[0])
    for epoch in range(1, 7):  # six epochs within the attempt's first second: two beats
        beat(0, epoch, 1.0 / epoch, 0.1 * epoch)
    record = json.loads(store.get(keys.worker_heartbeat("beat-job", 1, 0)))
    assert [e[0] for e in record["epochs"]] == [1, 2, 3, 4, 5, 6] and record["epoch"] == 6
    assert record["loss"] == pytest.approx(1 / 6)


def test_steps_are_recorded_in_the_background_at_most_every_so_often() -> None:
    store = MemoryChannel()
    attempt = _attempt()
    now = [attempt.started_at]
    beat = Heartbeat(store, attempt, clock=lambda: now[0])
    key = keys.worker_heartbeat("beat-job", 1, 0)
    beat.step(0, 0, 1, 100)
    assert store.get_many([key]) == {}  # not before a few seconds have passed
    now[0] += 6.0
    beat.step(0, 0, 60, 100)
    deadline = time.monotonic() + 5
    while not store.get_many([key]) and time.monotonic() < deadline:
        time.sleep(0.01)
    record = json.loads(store.get(key))
    assert (record["epoch"], record["step"], record["steps"], record["loss"]) == (0, 60, 100, None)
    now[0] += 1.0
    beat.step(0, 0, 70, 100)  # within a few seconds of the last: nothing new
    time.sleep(0.1)
    assert json.loads(store.get(key))["step"] == 60


def test_a_continued_rank_keeps_the_epochs_its_record_holds() -> None:
    store = MemoryChannel()
    attempt = _attempt()
    Heartbeat(store, attempt)(0, 1, 0.5, 1.0)
    Heartbeat(store, attempt, invocation=2, continued=True)(0, 2, 0.4, 2.0)  # a continuation ran epoch 2
    # A retry from a checkpoint before epoch 2 runs it again, then epoch 3.
    again = Heartbeat(store, attempt, invocation=3, continued=True)
    again(0, 2, 0.45, 2.5)
    again(0, 3, 0.3, 3.0)
    record = json.loads(store.get(keys.worker_heartbeat("beat-job", 1, 0)))
    assert record["epochs"] == [[1, 0.5, 1.0], [2, 0.45, 2.5], [3, 0.3, 3.0]] and record["invocation"] == 3


def test_a_record_keeps_the_newest_epochs_only() -> None:
    store = MemoryChannel()
    beat = Heartbeat(store, _attempt())
    for epoch in range(1, HISTORY + 3):
        beat(0, epoch, 0.1, 0.1)
    record = json.loads(store.get(keys.worker_heartbeat("beat-job", 1, 0)))
    assert len(record["epochs"]) == HISTORY and record["epochs"][-1][0] == HISTORY + 2


def test_steps_pass_on_at_most_once_a_period() -> None:
    now = [0.0]
    seen: list[int] = []
    step = at_most_every(1.0, lambda rank, epoch, done, steps: seen.append(done), clock=lambda: now[0])
    for done in range(1, 13):  # 12 steps over 3 s
        step(0, 0, done, 12)
        now[0] += 0.25
    assert seen == [1, 5, 9]


def test_a_status_shows_each_workers_latest_epoch_not_the_epochs_its_record_keeps() -> None:
    from lambdaml.backends.base import with_heartbeats

    store = MemoryChannel()
    beat = Heartbeat(store, _attempt())
    for epoch in (1, 2, 3):
        beat(0, epoch, 0.5, 1.0)
    job = parse_job({"dataset": "d", "workers": 1, "algorithm": {"epochs": 3}})
    status = with_heartbeats(store, "beat-job", job, {"state": "running", "attempt": 1})
    assert [(b["rank"], b["epoch"], "epochs" in b) for b in status["heartbeats"]] == [(0, 3, False)]


class _SlowStore(MemoryChannel):
    def _put(self, key: str, data: bytes) -> None:
        time.sleep(0.3)
        super()._put(key, data)


def test_settle_waits_for_a_steps_record_on_its_way() -> None:
    store = _SlowStore()
    attempt = _attempt()
    now = [attempt.started_at + 10.0]
    beat = Heartbeat(store, attempt, clock=lambda: now[0])
    beat._last_put = attempt.started_at  # the last record is 10 s old: this step's goes out
    beat.step(0, 0, 7, 9)
    assert store.get_many([keys.worker_heartbeat("beat-job", 1, 0)]) == {}  # still on its way
    beat.settle()
    assert json.loads(store.get(keys.worker_heartbeat("beat-job", 1, 0)))["step"] == 7
