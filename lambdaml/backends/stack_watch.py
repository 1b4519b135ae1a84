"""Following a stack's job from this side: its state record and its workers' heartbeats, which they
write to the data bucket, polled until the job ends. Nothing here knows the platform."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from lambdaml import keys
from lambdaml.backends.base import EventCallback, JobEvent, ProgressCallback, StepEvent
from lambdaml.channels import Channel
from lambdaml.config import JobSpec
from lambdaml.errors import ConfigError, JobCancelled, JobFailed
from lambdaml.runtime import records
from lambdaml.runtime.heartbeat import HeartbeatRecord
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.status import JobStatus
from lambdaml.storage import get_json, open_storage


def status_of(store: Channel, job_id: str) -> JobStatus:
    """The job's state record; a job the stack has no record of is a ConfigError."""
    status = records.status(store, job_id)
    if not status.known:
        raise ConfigError(f"no job {job_id!r} in this stack")
    return status


def job_of(store: Channel, job_id: str) -> JobSpec:
    """The job as it was started (its stored spec)."""
    return records.stored_job(store, job_id)


def _epochs_of(beat: HeartbeatRecord) -> list[tuple[int, float, float]]:
    """A record's epochs so far; one written before records kept them has its latest epoch alone."""
    if "epochs" in beat:
        return [(int(e), float(loss), float(elapsed)) for e, loss, elapsed in beat["epochs"]]
    loss, elapsed = beat.get("loss"), beat.get("elapsed_s")
    if not beat.get("epoch") or loss is None or elapsed is None:
        return []
    return [(int(beat["epoch"]), float(loss), float(elapsed))]


class HeartbeatReader:
    """What a follower learns from polling a job's heartbeats: each rank's new epochs, once and in
    order (a record keeps the epochs so far, so a beat the follower missed loses none), and its steps."""

    def __init__(self) -> None:
        self.reported: dict[int, int] = {}  # rank -> the last epoch reported
        self.steps: dict[int, tuple[int, int, int]] = {}  # rank -> (epochs, steps, steps per epoch) last reported

    def read(self, heartbeats: Iterable[HeartbeatRecord]) -> tuple[list[JobEvent], list[StepEvent]]:
        """The new epochs, by epoch and rank, and the new steps, of the records read now."""
        epochs: list[JobEvent] = []
        steps: list[StepEvent] = []
        for beat in heartbeats:
            rank = int(beat["rank"])
            for epoch, loss, elapsed in _epochs_of(beat):
                if epoch > self.reported.get(rank, 0):
                    self.reported[rank] = epoch
                    epochs.append(JobEvent(rank, epoch, loss, elapsed))
            at = (int(beat["epoch"]), int(beat.get("step") or 0), int(beat.get("steps") or 0))
            if at[2] and at != self.steps.get(rank):
                self.steps[rank] = at
                steps.append(StepEvent(rank, *at))
        return sorted(epochs, key=lambda e: (e.epoch, e.rank)), steps


def watch(
    job: JobSpec,
    job_id: str,
    attempt: int,
    *,
    on_event: EventCallback | None = None,
    on_progress: ProgressCallback | None = None,
    poll_s: float = 0.5,
) -> JobResult:
    """Follow an attempt's heartbeats until the job ends; return its result record.

    Each rank's epochs are reported as ``JobEvent``s, every one once and in order, and its steps
    within an epoch as ``StepEvent``s, as local workers report theirs.

    Bounded: if neither the status nor any heartbeat changes for the job's sync timeout
    plus a minute, the job is declared stuck. A later attempt of the job ends this one.
    """
    store = open_storage(job.storage)
    beats = [keys.worker_heartbeat(job_id, attempt, r) for r in range(job.workers)]
    last_change, last_seen = time.monotonic(), None
    limit = job.sync.timeout_s + 60
    reader = HeartbeatReader()
    while True:
        status = status_of(store, job_id)
        if status.attempt != attempt:
            raise JobFailed(f"job {job_id} attempt {attempt} was superseded by attempt {status.attempt}")
        heartbeats: list[HeartbeatRecord] = [json.loads(v) for v in store.get_many(beats).values()]
        seen = (status.state, status.updated_at, sorted((h["rank"], h.get("at")) for h in heartbeats))
        if seen != last_seen:
            last_seen, last_change = seen, time.monotonic()
        epochs, steps = reader.read(heartbeats)
        for event in epochs:
            if on_event is not None:
                on_event(event)
        for step in steps:
            if on_progress is not None:
                on_progress(step)
        if status.state == records.SUCCEEDED:
            key = keys.job_result(job_id)
            return JobResult.from_json(get_json(store, key), key)
        _raise_if_ended_badly(status)
        if time.monotonic() - last_change > limit:
            raise JobFailed(f"job {job_id} made no progress for {limit:g}s (last state: {status.state})")
        time.sleep(poll_s)


def _raise_if_ended_badly(status: JobStatus) -> None:
    """JobCancelled for a cancelled job, JobFailed for a failed one; nothing for any other state."""
    if status.state == records.CANCELLED:
        raise JobCancelled(f"job {status.job_id} was cancelled")
    if status.state == records.FAILED:
        raise JobFailed(f"job {status.job_id} failed: {status.error or 'no detail'}")
