"""The jobs this machine ran: ``status``, ``logs``, ``cancel``, ``attach`` and ``jobs`` without ``--stack``.

They look in this machine's job registry (``runtime.machine_jobs``) and nowhere else, but for
what only a running job's store knows: its workers' heartbeats (``status``) and its cancel
marker (``cancel``).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import TYPE_CHECKING, Any, TypedDict

from lambdaml.cli.follow import EXIT_ENDED_BADLY, follow_lines
from lambdaml.cli.output import (
    console,
    errors,
    jobs_table,
    one_line,
    plural,
    print_json,
    print_json_line,
    print_result,
    progress,
    status_table,
)
from lambdaml.errors import ConfigError, LambdaMLError

if TYPE_CHECKING:
    from lambdaml.backends.base import WorkerProgress
    from lambdaml.runtime.heartbeat import HeartbeatRecord
    from lambdaml.runtime.machine_jobs import MachineJob, MachineJobSummary
    from lambdaml.runtime.prediction_record import PredictionError
    from lambdaml.runtime.reports import JobResult

log = logging.getLogger(__name__)

#: How long ``status`` waits for a running job's store to answer (its heartbeats are a detail).
_HEARTBEATS_WAIT_S = 2.0
#: How long a follower of a job on this machine waits for a sign of life past the job's sync
#: timeout (or, for a record without one, in all).
_QUIET_GRACE_S = 60.0


def here(job_id: str) -> MachineJob:
    """A job this machine ran, from its registry; one that is not there is one line naming where it looked."""
    from lambdaml.runtime.machine_jobs import MachineRegistry, shown

    registry = MachineRegistry()
    job = registry.job(job_id)
    if job is None:
        raise ConfigError(
            f"no job {job_id!r} among the jobs run on this machine ({shown(registry.root)}); "
            "for a stack's job add --stack NAME"
        )
    return job


class Running(TypedDict, total=False):
    """What ``status`` adds to the record of a job that runs here: its heartbeats, or why there are none."""

    heartbeats: list[HeartbeatRecord] | None
    epochs: int | None
    heartbeats_unavailable: str


def heartbeats_here(job: MachineJob) -> tuple[WorkerProgress | None, str | None]:
    """A running job's heartbeats from its store; or why there are none."""
    from lambdaml.backends.base import worker_progress
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime import records
    from lambdaml.storage import open_storage

    spec = job.storage_spec(connect_timeout_s=_HEARTBEATS_WAIT_S)
    if spec is None:
        return None, "its store is not recorded"
    try:
        store = open_storage(spec)
        state = records.status(store, job.job_id)
        return worker_progress(store, job.job_id, records.stored_job(store, job.job_id), state.attempt), None
    except LambdaMLError as exc:
        return None, _store_problem(job, exc)


def _store_problem(job: MachineJob, exc: Exception) -> str:
    from lambdaml.errors import ChannelUnavailable

    verb = "does not answer" if isinstance(exc, ChannelUnavailable) else "failed"
    return f"its store {job.where()} {verb} ({one_line(str(exc))})"


def status_here(args: argparse.Namespace) -> int:
    """A job this machine ran: its record, and while it runs, its workers' heartbeats if its store answers."""
    job = here(args.job_id)
    if args.watch:
        return watch_here(args, job)
    summary, running = describe_here(job)
    if args.output == "json":
        print_json({**summary, **running})
        return 0
    show_here(job, summary, running)
    return 0


def describe_here(job: MachineJob) -> tuple[MachineJobSummary, Running]:
    """What ``status`` shows of a job run here: its record and, while it runs, its heartbeats (or why not)."""
    from lambdaml.runtime import records

    summary, running = job.summary(time.time()), Running()
    if job.record.state == records.RUNNING:
        beats, problem = heartbeats_here(job)
        running["heartbeats"] = None if beats is None else beats["heartbeats"]
        running["epochs"] = job.epochs if beats is None else beats["epochs"]
        if problem:
            running["heartbeats_unavailable"] = problem
    return summary, running


def show_here(job: MachineJob, summary: MachineJobSummary, running: Running) -> None:
    from analytic_model.advisor import format_money, format_time
    from lambdaml.runtime.machine_jobs import shown

    record = job.record
    error = f" ({one_line(record.error)})" if record.error and record.state != "succeeded" else ""
    console.print(f"job {job.job_id} on this machine ({shown(job.folder)}): {record.state}{error}")
    ran = "running for" if record.ended_at is None else "took"
    what = [f"attempt {record.attempt}", f"{job.backend or '?'} backend"]
    if record.workers is not None:
        what.append(plural(record.workers, "worker"))
    if job.dataset:
        what.append(f"dataset {job.dataset}")
    what.append(f"started {format_time(max(0.0, time.time() - record.created_at))} ago")
    what.append(f"{ran} {format_time(summary['duration_s'])}")
    console.print("  " + ", ".join(what))
    if record.cost_dollars is not None:
        estimated = " (estimated from the workers' run time)" if record.cost_estimated else ""
        console.print(f"  cost    {format_money(record.cost_dollars)}{estimated}")
    if job.result_path:
        console.print(f"  result  {job.result_path}")
    if record.model_uri:
        console.print(f"  model   {record.model_uri}")
    console.print(f"  store   {job.where()}")
    beats = running.get("heartbeats")
    if beats:
        console.print(status_table({"epochs": running.get("epochs"), "heartbeats": beats}))
    elif running.get("heartbeats_unavailable"):
        console.print(f"  no heartbeats: {running['heartbeats_unavailable']}")


def watch_here(args: argparse.Namespace, job: MachineJob) -> int:
    """``status --watch`` of a job run here: its status each time it changes, until it ends."""
    from lambdaml.runtime import records

    limit = (job.timeout_s or 0.0) + _QUIET_GRACE_S
    last_seen: Any = None
    last_change = time.monotonic()
    try:
        while True:
            summary, running = describe_here(job)
            beats = running.get("heartbeats") or []
            seen = (summary["state"], summary["updated_at"], [(h["rank"], h["epoch"]) for h in beats])
            if seen != last_seen:
                last_seen, last_change = seen, time.monotonic()
                if args.output == "json":
                    print_json_line({**summary, **running})
                else:
                    show_here(job, summary, running)
            state = job.record.state
            if state in records.ENDED:
                return 0 if state == records.SUCCEEDED else EXIT_ENDED_BADLY
            if time.monotonic() - last_change > limit:
                raise ConfigError(f"job {args.job_id} made no progress for {limit:g}s (state: {state})")
            time.sleep(args.interval)
            job = here(args.job_id)
    except KeyboardInterrupt:
        errors.print(f"stopped watching; job {args.job_id} goes on on this machine")
        return 130


def logs_here(args: argparse.Namespace) -> int:
    """The lines the workers of a job run here kept (``LAMBDAML_HOME/jobs/ID/rank-R.jsonl``)."""
    from lambdaml.runtime.job_logs import LogReader
    from lambdaml.runtime.machine_jobs import shown

    job = here(args.job_id)
    reader = LogReader(job.folder)
    where = f"kept on this machine ({shown(job.folder)})"

    def header() -> None:
        progress.print(f"job {args.job_id}'s worker lines, {where}:")

    limit = (job.timeout_s or 0.0) + _QUIET_GRACE_S
    printed = follow_lines(args, reader.new_lines, lambda: here(args.job_id).record.state, limit=limit,
                           before_first=header)  # fmt: skip
    if printed == 0 and args.output != "json":
        rank = f" of rank {args.rank}" if args.rank is not None else ""
        console.print(f"no worker lines{rank} of job {args.job_id} {where}")
    return 0


def cancel_here(args: argparse.Namespace) -> int:
    """Cancel a job running here, through its store's cancel marker; an ended job is said to be so (exit 0)."""
    from dataclasses import replace

    from lambdaml.backends import BACKENDS
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime import machine_jobs, records
    from lambdaml.runtime.machine_jobs import MachineRegistry
    from lambdaml.storage import open_storage

    job = here(args.job_id)
    state = job.record.state
    # Its process gone (killed, say) without recording its end: it runs no more, but it never ended.
    orphan = job.stored_state == records.RUNNING and state != records.RUNNING
    if state != records.RUNNING and not orphan:
        if args.output == "json":
            print_json({**job.summary(time.time()), "cancelled": False})
        else:
            console.print(f"job {args.job_id} on this machine has ended ({state}); nothing to cancel")
        return EXIT_ALREADY_ENDED
    spec = job.storage_spec()
    try:
        if spec is None:
            raise ConfigError("its store is not recorded")
        standing = BACKENDS.get(job.backend or "local")(spec).cancel(args.job_id).state
        machine_jobs.copy_state(open_storage(spec), args.job_id)
    except LambdaMLError as exc:
        if not orphan:
            problem = _store_problem(job, exc) if spec is not None else str(exc)
            raise ConfigError(f"job {args.job_id} runs on this machine, but {problem}: {_stop_hint(job)}") from None
        # Nothing of it runs: this machine's record is the one left to say it was cancelled.
        now = time.time()
        MachineRegistry().save(replace(job.record, state=records.CANCELLED, updated_at=now, finished_at=now))
        standing = records.CANCELLED
    if args.output == "json":
        print_json({**here(args.job_id).summary(time.time()), "cancelled": standing == records.CANCELLED})
    elif standing == records.CANCELLED:
        after = f" (its process {job.pid} had gone)" if orphan else "; its workers stop at their next heartbeat"
        console.print(f"job {args.job_id} on this machine: cancelled{after}")
    else:
        console.print(f"job {args.job_id} on this machine: {standing}; nothing to cancel")
    return 0


#: ``cancel``'s exit status for a job that had already ended: nothing is left running, as asked.
EXIT_ALREADY_ENDED = 0


def _stop_hint(job: MachineJob) -> str:
    return f"stop it with Ctrl-C where it runs (process {job.pid})" if job.pid else "stop it where it runs"


def attach_here(args: argparse.Namespace) -> int:
    """Follow a job that another terminal of this machine runs, ending as its ``train`` will; or say why not."""
    from lambdaml.runtime import records
    from lambdaml.runtime.job_logs import LogReader

    job = here(args.job_id)
    state = job.record.state
    if state == records.SUCCEEDED:
        return _report(_kept_result(job), args.output)
    if state != records.RUNNING:
        error = f": {one_line(job.record.error)}" if job.record.error else ""
        raise ConfigError(f"job {args.job_id} on this machine has ended ({state}{error}); there is nothing to follow")
    if job.alive() is None and job.host is not None:
        raise ConfigError(f"job {args.job_id} runs on {job.host}, not on this machine; attach to it there")
    progress.print(
        f"attached to {args.job_id}: {job.backend or 'local'} backend, {job.record.workers or '?'} workers "
        f"on this machine (process {job.pid})"
    )
    reader = LogReader(job.folder)
    reader.new_lines()  # what it printed before: train prints only what comes next, too
    limit = (job.timeout_s or 0.0) + _QUIET_GRACE_S
    last_change = time.monotonic()
    try:
        while True:
            job = here(args.job_id)
            for line in reader.new_lines():
                last_change = time.monotonic()
                if line.rank == 0 and line.epoch is not None:  # the loss is global: rank 0's, as train prints
                    epoch = line.epoch
                    progress.print(
                        f"  epoch {int(epoch['epoch']):>3}/{job.epochs}  loss {epoch['loss']:.5f}  "
                        f"{epoch['elapsed_s']:7.2f}s"
                    )
            state = job.record.state
            if state == records.SUCCEEDED:
                return _report(_kept_result(job), args.output)
            if state in records.ENDED:
                error = f": {one_line(job.record.error)}" if job.record.error else ""
                raise ConfigError(f"job {args.job_id} {state}{error}")
            if time.monotonic() - last_change > limit:
                raise ConfigError(f"job {args.job_id}: nothing heard from it for {limit:g}s (state: {state})")
            time.sleep(0.5)
    except KeyboardInterrupt:
        errors.print(f"stopped following; job {args.job_id} goes on in its own terminal (process {job.pid})")
        return 130


def _report(result: JobResult, output: str) -> int:
    """A followed job's end, as ``train`` prints it (``cli.train.report``, which imports this module)."""
    if output == "json":
        print_json(result.to_json())
    else:
        print_result(result)
    return 0


def _kept_result(job: MachineJob) -> JobResult:
    """A succeeded job's result: the copy kept here, or else the one in its bucket (if that answers)."""
    from lambdaml import keys
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime.reports import JobResult
    from lambdaml.storage import get_json, open_storage

    kept = job.result()
    if kept is not None:
        return kept
    spec = job.storage_spec()
    key = keys.job_result(job.job_id)
    try:
        if spec is None:
            raise ConfigError("its store is not recorded")
        return JobResult.from_json(get_json(open_storage(spec), key), key)
    except LambdaMLError as exc:
        raise ConfigError(
            f"job {job.job_id} succeeded, but its result is neither kept here nor read from its store "
            f"({one_line(str(exc))}); see {job.result_path or key}"
        ) from None


def jobs_here(args: argparse.Namespace) -> int:
    """The jobs this machine ran (``LAMBDAML_HOME/jobs``), newest first; reads nothing but that folder."""
    from lambdaml.runtime.machine_jobs import MachineRegistry, shown

    registry = MachineRegistry()
    now = time.time()
    found = registry.newest_jobs(args.state)
    for problem in registry.refused:
        errors.print(f"warning: {problem}; left out")
    where = f"this machine ({shown(registry.root)})"
    errors_of = {job.job_id: against_prediction(job) for job in found}
    if args.output == "json":
        print_json([{**job.summary(now), "time_vs_predicted": _ratio(errors_of[job.job_id])} for job in found])
    elif found:
        progress.print(f"jobs run on {where}:")
        shown_errors = {job_id: "-" if e is None else e.describe() for job_id, e in errors_of.items()}
        console.print(jobs_table([job.record.summary(now) for job in found], now=now, predicted=shown_errors))
    else:
        console.print("no jobs" + (f" {args.state}" if args.state else "") + f" run on {where}")
    return 0


def against_prediction(job: MachineJob) -> PredictionError | None:
    """A succeeded job's measured time against the prediction it ran under (its result file, else the
    copy kept here); None where it has no result or no prediction, or its result does not read."""
    from lambdaml.runtime.prediction_record import prediction_error
    from lambdaml.runtime.reports import read_result_file

    try:
        result = read_result_file(job.result_path) if job.result_path else job.result()
    except LambdaMLError as exc:  # a result file moved or damaged since: the listing goes on
        log.debug("job %s: result not read: %s", job.job_id, exc)
        result = None
    return None if result is None else prediction_error(result)


def _ratio(error: PredictionError | None) -> float | None:
    """The measured time over the predicted, as ``jobs --output json`` prints it."""
    return None if error is None else error.time_ratio
