"""Local backend: W worker processes on this machine (threads for an in-process channel, such as the in-memory one)."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_ready
from typing import Any

from lambdaml import catalogue
from lambdaml.backends.base import EventCallback, JobEvent, MachineBackend, ProgressCallback, Run, StepEvent
from lambdaml.channels import Channel, open_channel
from lambdaml.config import JobSpec
from lambdaml.cost import Invocation, JobCost, job_cost
from lambdaml.errors import JobCancelled, JobFailed, LambdaMLError
from lambdaml.interrupts import ignore_sigint, sigint_blocked
from lambdaml.runtime.heartbeat import Heartbeat, at_most_every, both
from lambdaml.runtime.job_logs import WorkerLog
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import WorkerReport, WorkerRow, total_traffic
from lambdaml.runtime.worker import Lifetime, run_worker
from lambdaml.storage import open_storage

log = logging.getLogger(__name__)

# Seconds a job may go without any worker reporting before the backend gives up on it,
# on top of the job's own synchronization timeout (workers time out by themselves first).
_SILENCE_GRACE_S = 30.0
#: How often a worker tells this process the steps it has done (through its queue: no request).
STEPS_EVERY_S = 1.0
#: How long stopping waits for the workers to end on SIGTERM before it kills them.
_STOP_GRACE_S = 5.0


def _worker_main(
    job: JobSpec,
    attempt: Attempt,
    secret: bytes | None,
    rank: int,
    events: Any,
    channel: Channel | None = None,
) -> None:
    """Entry point of one worker: every outcome goes back as a message, never as a traceback."""
    # No deadline; periodic checkpoints let an interrupted job go on with --resume.
    lifetime = Lifetime(
        remaining_s=lambda: float("inf"), checkpoint_every=job.runtime.checkpoint_every, on_lambda=False
    )

    # Its lines, for ``lambdaml logs``: a thread (the in-memory channel) keeps only its own.
    worker_log = WorkerLog.open(attempt, rank, epochs=job.algorithm.epochs, whole_process=channel is None)

    def on_epoch(r: int, epoch: int, loss: float, elapsed: float) -> None:
        worker_log.epoch(epoch, loss, elapsed)
        events.put(("epoch", rank, (epoch, loss, elapsed)))

    def on_step(r: int, epoch: int, step: int, steps: int) -> None:
        events.put(("steps", rank, (epoch, step, steps)))

    try:
        beat = Heartbeat(
            open_storage(job.storage), attempt, every_s=job.runtime.heartbeat_every_s, final_epoch=job.algorithm.epochs
        )
        report = run_worker(
            job,
            attempt,
            rank,
            secret=secret,
            on_epoch=both(on_epoch, beat),
            on_step=both(at_most_every(STEPS_EVERY_S, on_step), beat.step),
            channel=channel,
            lifetime=lifetime,
        )
    except JobCancelled as exc:
        worker_log.line(str(exc))
        events.put(("cancelled", rank, str(exc)))
    except LambdaMLError as exc:
        worker_log.line(f"worker {rank} failed: {exc}", level="ERROR")
        events.put(("error", rank, str(exc)))
    except Exception as exc:  # a bug: keep the type so it can be found
        log.exception("worker %d crashed", rank)
        events.put(("error", rank, f"{type(exc).__name__}: {exc}"))
    else:
        events.put(("done", rank, report))
    finally:
        worker_log.close()


def _worker_process(*args: Any) -> None:
    """A worker process: deaf to Ctrl-C (its parent stops it) and never outliving its parent."""
    ignore_sigint()  # born with SIGINT blocked (LocalBackend.start): none reached it before this
    parent = mp.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()
    _worker_main(*args)


def _exit_with(parent_sentinel: int) -> None:
    """Wait for the parent to end, then end this process: a worker deaf to Ctrl-C must not be
    left training if its parent is killed before it can stop it."""
    wait_ready([parent_sentinel])
    os._exit(1)


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start workers without running the caller's main script again in each of them.

    ``spawn`` re-imports the parent's ``__main__`` in every child, so a user's script (or a
    program read from stdin) without an ``if __name__ == "__main__":`` guard would train again
    in each worker, or fail to be found. A worker needs none of it, as a Lambda function never
    sees the caller's program: with no ``__file__`` or ``__spec__`` on ``__main__`` while the
    processes start, spawn sends nothing of it.
    """
    main = sys.modules["__main__"]
    saved: dict[str, object] = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


@dataclass
class _Workers:
    workers: list[Any]
    events: Any


def _stop(handle: _Workers) -> None:
    """Terminate every worker process still running, then wait for each, a bounded time; kill
    those still there (threads end by themselves)."""
    started = [w for w in handle.workers if w.ident is not None]
    processes = [w for w in started if isinstance(w, mp.process.BaseProcess)]
    for worker in processes:
        if worker.is_alive():
            worker.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for worker in started:
        worker.join(timeout=max(deadline - time.monotonic(), 0.0))
    for worker in processes:
        if worker.is_alive():  # e.g. stopped (SIGSTOP): it never handles SIGTERM
            log.info("worker %s did not stop within %gs; killing it", worker.name, _STOP_GRACE_S)
            worker.kill()
            worker.join(timeout=_STOP_GRACE_S)  # SIGKILL ends even a stopped process


class LocalBackend(MachineBackend):
    """Each rank in its own process, like Lambda; a channel that cannot connect processes runs ranks as threads."""

    name = "local"

    def start(self, job: JobSpec, attempt: Attempt, secret: bytes | None) -> _Workers:
        workers: list[Any]
        if not catalogue.channel(job.channel.kind).connects_processes:  # one channel, shared by threads
            events: Any = queue.Queue()
            shared = open_channel(job.channel)
            workers = [
                threading.Thread(target=_worker_main, args=(job, attempt, secret, r, events, shared), daemon=True)
                for r in range(job.workers)
            ]
        else:
            ctx = mp.get_context("spawn")
            events = ctx.Queue()
            workers = [
                ctx.Process(
                    target=_worker_process,
                    args=(job, attempt, secret, r, events),
                    name=f"lambdaml-worker-{r}",
                    daemon=True,  # an exit that skips stop() still ends them (multiprocessing's atexit)
                )
                for r in range(job.workers)
            ]
        handle = _Workers(workers, events)
        try:
            with _main_module_hidden(), sigint_blocked():  # Ctrl-C is the parent's: it stops them
                for worker in workers:
                    worker.start()
        except BaseException:
            _stop(handle)
            raise
        return handle

    def stop(self, run: Run) -> None:
        _stop(run.handle)

    def collect(
        self, run: Run, on_event: EventCallback | None, on_progress: ProgressCallback | None = None
    ) -> list[WorkerReport]:
        job, workers, events = run.job, run.handle.workers, run.handle.events
        reports: dict[int, WorkerReport] = {}
        silence_limit = job.sync.timeout_s + _SILENCE_GRACE_S
        last_heard = time.monotonic()
        while len(reports) < job.workers:
            message = _next_message(events, {r: w for r, w in enumerate(workers) if r not in reports})
            if message is None:
                if time.monotonic() - last_heard > silence_limit:
                    raise JobFailed(f"no worker reported for {silence_limit:g}s; giving up")
                continue
            last_heard = time.monotonic()
            kind, rank, payload = message
            report = _relay(kind, rank, payload, on_event, on_progress)
            if report is not None:
                reports[rank] = report
        return [reports[r] for r in range(job.workers)]

    def cost(self, job: JobSpec, workers: Sequence[WorkerRow], wall_s: float) -> JobCost:
        """Priced as Lambda would bill the same run: one invocation per worker for its whole time."""
        as_lambda = [Invocation(w.times.total_s, job.runtime.memory_mb, cold=True) for w in workers]
        return job_cost(
            job.channel.kind, total_traffic(workers), as_lambda, wall_s, job.storage.region,
            store=job.channel.store_kind,
        )  # fmt: skip


#: A worker's message: (kind, rank, payload); see ``_worker_main``.
_Message = tuple[str, int, Any]


def _next_message(events: Any, waiting: dict[int, Any]) -> _Message | None:
    """The next message from the workers, or None after a short wait without one. A worker of
    ``waiting`` (by rank: those yet to report) that has exited without a report fails the job."""
    try:
        message: _Message = events.get(timeout=0.5)
        return message
    except queue.Empty:
        pass
    dead = [rank for rank, worker in waiting.items() if not worker.is_alive()]
    if not dead:
        return None
    try:  # a message may still be in flight from a worker that just exited
        message = events.get(timeout=1.0)
        return message
    except queue.Empty:
        raise JobFailed(f"worker {dead[0]} exited without a report") from None


def _relay(
    kind: str, rank: int, payload: Any, on_event: EventCallback | None, on_progress: ProgressCallback | None
) -> WorkerReport | None:
    """Pass a worker's progress on; its report, or its failure as the job's."""
    if kind == "cancelled":
        raise JobCancelled(payload)
    if kind == "error":
        raise JobFailed(f"worker {rank} failed: {payload}")
    if kind == "epoch":
        if on_event is not None:
            on_event(JobEvent(rank, *payload))
    elif kind == "steps":
        if on_progress is not None:
            on_progress(StepEvent(rank, *payload))
    else:
        report: WorkerReport = payload
        return report
    return None
