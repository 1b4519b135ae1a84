"""The Backend interface: launch a job's workers, wait for its result, report its status, cancel it.

Local processes, torchrun and a deployed stack (AWS or local) differ only here. Every job
goes through one path (``lambdaml.driver.run_job``): ``launch`` claims the job and starts its
workers, ``wait`` follows them to the result record, which one function assembles whatever
ran the workers (``lambdaml.runtime.results.assemble_result``).
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, TypedDict

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec
from lambdaml.cost import JobCost
from lambdaml.data.shards import Manifest
from lambdaml.errors import JobCancelled, JobFailed
from lambdaml.runtime import machine_jobs, records
from lambdaml.runtime.heartbeat import HeartbeatRecord
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import JobResult, WorkerReport, WorkerRow
from lambdaml.runtime.results import (
    assemble_result,
    clear_job_channel,
    estimated_cost_fields,
    lambda_job_cost,
)
from lambdaml.runtime.start import begin, job_secret
from lambdaml.runtime.status import JobStatus
from lambdaml.storage import open_storage


@dataclass(frozen=True)
class JobEvent:
    """Progress from a worker: an epoch finished."""

    rank: int
    epoch: int
    loss: float
    elapsed_s: float


@dataclass(frozen=True)
class StepEvent:
    """Progress from a worker within an epoch: ``epoch`` epochs done, ``step`` of the next one's ``steps`` done.

    Workers report it every so often (a second or so on this machine, every few seconds from a
    stack's heartbeats), never once per step.
    """

    rank: int
    epoch: int
    step: int
    steps: int


EventCallback = Callable[[JobEvent], None]
ProgressCallback = Callable[[StepEvent], None]


@dataclass
class Run:
    """A launched job: its attempt, and what its backend needs to follow it."""

    job: JobSpec
    attempt: Attempt
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    started: float = field(default_factory=time.perf_counter)
    manifest: Manifest | None = None
    handle: Any = None  # the backend's own: processes, a torchrun, nothing for a stack


def known_state(store: Channel, job_id: str) -> JobStatus:
    """The job's state record; a job the bucket has no record of is an error."""
    state = records.status(store, job_id)
    if not state.known:
        raise JobFailed(f"no job {job_id!r} in {store.describe()}")
    return state


class WorkerProgress(TypedDict):
    """What a status shows of an attempt's workers: the job's epochs (None: not recorded) and each
    worker's latest heartbeat (its latest epoch; not the epochs so far its record keeps for a follower)."""

    epochs: int | None
    heartbeats: list[HeartbeatRecord]


def worker_progress(store: Channel, job_id: str, job: JobSpec, attempt: int) -> WorkerProgress:
    """The heartbeats of ``attempt``'s workers, in rank order, with the job's epochs."""
    beats = store.get_many([keys.worker_heartbeat(job_id, attempt, r) for r in range(job.workers)])
    heartbeats = []
    for key in sorted(beats):
        beat = json.loads(beats[key])
        beat.pop("epochs", None)
        heartbeats.append(beat)
    return {"epochs": job.algorithm.epochs, "heartbeats": heartbeats}


def with_heartbeats(
    store: Channel, job_id: str, job: JobSpec, state: JobStatus | Mapping[str, object]
) -> dict[str, object]:
    """A state record (or its JSON) as stored (with the fields another version wrote), and its attempt's
    ``worker_progress``: what a status prints."""
    if not isinstance(state, JobStatus):
        state = JobStatus.from_json(state, job_id)
    return {**state.to_json(), **worker_progress(store, job_id, job, state.attempt)}


class Backend(ABC):
    """Where the workers of a job run; how they synchronize follows from it."""

    name: ClassVar[str] = "abstract"
    #: Whether the workers synchronize through the job's channel (IaaS workers use gloo).
    uses_channel: ClassVar[bool] = True

    @abstractmethod
    def store(self) -> Channel:
        """The data bucket that holds the jobs' records."""

    @abstractmethod
    def launch(self, job: JobSpec, *, job_id: str | None = None, resume: bool = False) -> Run:
        """Claim the job id (or, with ``resume``, its next attempt) and start its workers."""

    @abstractmethod
    def wait(
        self, run: Run, *, on_event: EventCallback | None = None, on_progress: ProgressCallback | None = None
    ) -> JobResult:
        """Follow the run to its end; return its result record or raise JobFailed (JobCancelled).

        ``on_event`` hears of each rank's epochs as they end, ``on_progress`` of its steps every so often.
        """

    def status(self, job_id: str) -> tuple[JobStatus, WorkerProgress]:
        """The job's state record, and the heartbeats of its current attempt's workers."""
        store = self.store()
        state = known_state(store, job_id)
        return state, worker_progress(store, job_id, records.stored_job(store, job_id), state.attempt)

    def cancel(self, job_id: str) -> JobStatus:
        """Ask a running job to stop: its workers see the marker at their next heartbeat. Its record after."""
        return records.cancel(self.store(), job_id)

    def saved(self, run: Run, result: JobResult) -> None:
        """The run's result file is on this machine, at ``result.result_path``."""

    def predicted(self, result: JobResult) -> None:
        """The run's result now holds the prediction it ran under: a copy the backend keeps takes it too."""

    def cost(self, job: JobSpec, workers: Sequence[WorkerRow], wall_s: float) -> JobCost:
        """What the run cost: Lambda GB-seconds and channel requests, unless the backend bills otherwise."""
        return lambda_job_cost(job, workers, wall_s)


class MachineBackend(Backend):
    """Workers on this machine (processes, torchrun): this process claims the job, starts and follows
    the workers, assembles the result and records every ending, so ``--resume`` finds it."""

    def __init__(self, storage: StorageSpec) -> None:
        self.storage = storage

    def store(self) -> Channel:
        return open_storage(self.storage)

    def check(self, job: JobSpec) -> None:
        """Refuse, before anything is claimed, a job these workers cannot run."""

    @abstractmethod
    def start(self, job: JobSpec, attempt: Attempt, secret: bytes | None) -> Any:
        """Start the workers of ``attempt``; return what ``collect`` and ``stop`` need."""

    @abstractmethod
    def collect(
        self, run: Run, on_event: EventCallback | None, on_progress: ProgressCallback | None = None
    ) -> list[WorkerReport]:
        """Every rank's report in rank order, or raise JobFailed / JobCancelled."""

    @abstractmethod
    def stop(self, run: Run) -> None:
        """Stop whatever of the workers still runs."""

    def launch(self, job: JobSpec, *, job_id: str | None = None, resume: bool = False) -> Run:
        self.check(job)
        store, manifest, attempt = begin(job, job_id, resume=resume, check_channel=self.uses_channel)
        run = Run(job, attempt, manifest=manifest)
        machine_jobs.record_start(store, job, attempt, self.name)  # ``lambdaml jobs`` lists it from now
        try:
            run.handle = self.start(job, attempt, job_secret(job) if self.uses_channel else None)
        except BaseException as exc:
            self._ended(run, exc)
            raise
        return run

    def wait(
        self, run: Run, *, on_event: EventCallback | None = None, on_progress: ProgressCallback | None = None
    ) -> JobResult:
        job, attempt = run.job, run.attempt
        try:
            reports = self.collect(run, on_event, on_progress)
        except (JobFailed, JobCancelled, KeyboardInterrupt) as exc:
            self._ended(run, exc)
            raise
        finally:
            self.stop(run)
        assert run.manifest is not None
        wall_s = time.perf_counter() - run.started
        result = assemble_result(
            job, attempt, run.manifest, reports, wall_s=wall_s, started_at=run.started_at, backend=self.name,
            cost=self.cost,
        )  # fmt: skip
        machine_jobs.record_result(result)
        store = self.store()
        try:
            records.finish(store, attempt, result)
        except JobCancelled:  # cancelled as it finished: the cancel stands, and so its model is not used
            machine_jobs.record_state(store, attempt, records.CANCELLED)
            raise
        machine_jobs.record_state(store, attempt, records.SUCCEEDED)
        return result

    def predicted(self, result: JobResult) -> None:
        machine_jobs.record_result(result)  # the copy ``jobs`` and ``attach`` read

    def saved(self, run: Run, result: JobResult) -> None:
        if result.result_path is not None:
            machine_jobs.record_result_path(run.attempt.job_id, result.result_path)

    def _ended(self, run: Run, exc: BaseException) -> None:
        """Record how the attempt ended (a cancel already did) and clear what it left on its channel."""
        attempt = run.attempt
        ended, error = records.CANCELLED, None
        # What it cost up to then, estimated from its run time (a cancel recorded the state without it).
        cost = estimated_cost_fields(run.job, time.perf_counter() - run.started, self.name)
        if not isinstance(exc, JobCancelled):
            ended = records.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else records.FAILED
            error = str(exc) or "interrupted"
        failure = {} if error is None else {"error": error}
        records.set_status(self.store(), attempt.job_id, attempt.number, ended, **cost, **failure)
        machine_jobs.record_state(self.store(), attempt, ended, error=error)
        if self.uses_channel:
            clear_job_channel(run.job, attempt.job_id, attempt.number)
