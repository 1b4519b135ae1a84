"""What the Lambda functions do; the handlers in ``functions/`` only call these.

The coordinator validates a job, claims its id (or, to resume it, its next attempt) and
fans out W asynchronous worker invocations. A worker trains its rank until it finishes, or until its deadline is near:
then it checkpoints and invokes itself again. Failures follow Lambda's rules: an
unexpected crash raises, so AWS retries the event and the retry resumes from the last
checkpoint; a failure that retrying cannot fix (another worker gone, bad data) marks the
job failed and returns. Everything a user watches (status, heartbeats, reports, result)
is a JSON record in the data bucket. A worker event names the attempt it belongs to and,
where the channel asks for it, carries the job's MAC key (``seal_key``), which no store
ever holds.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import replace
from typing import Any

from lambdaml import catalogue, keys, settings
from lambdaml.channels import Channel
from lambdaml.config import JobSpec
from lambdaml.data.shards import read_manifest
from lambdaml.errors import ConfigError, Diverged, JobCancelled, JobFailed, LambdaMLError
from lambdaml.platforms.aws_lambda.context import LambdaContext, lifetime
from lambdaml.platforms.aws_lambda.failures import WorkerGaveUp, cost_so_far, resume_or_fail
from lambdaml.platforms.aws_lambda.invoke import BotoInvoker, Invoker
from lambdaml.platforms.aws_lambda.logs import JOB_LOG_MARK
from lambdaml.platforms.fit import check_fits_stack
from lambdaml.runtime import records
from lambdaml.runtime.events import STARTS, CoordinatorEvent, WorkerEvent
from lambdaml.runtime.heartbeat import Heartbeat
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.registry import TableRegistry
from lambdaml.runtime.reports import Continuation, WorkerReport
from lambdaml.runtime.results import assemble_result, clear_job_channel, collect_reports, estimated_cost_fields
from lambdaml.runtime.start import begin, job_secret
from lambdaml.runtime.status import JobStatus
from lambdaml.runtime.worker import Lifetime, run_worker
from lambdaml.storage import open_storage, put_json

log = logging.getLogger(__name__)

# True until this process has served one worker invocation: Lambda reuses warm processes,
# so the first invocation in a process is the cold start.
_cold = True


@functools.cache
def _record_jobs_in_the_stacks_table() -> None:
    """On a stack, every state this function records goes to its JobsTable too (once per warm process)."""
    table = settings.stack_environment().jobs_table
    if table:
        from lambdaml import aws

        records.also_record_in(TableRegistry(aws.client(TableRegistry.SERVICE), table))


# --- coordinator ------------------------------------------------------------------


def coordinate(event: dict[str, Any], context: LambdaContext, *, invoker: Invoker | None = None) -> dict[str, Any]:
    """Start, resume, cancel or report on a job; also the on-failure destination of the workers."""
    _record_jobs_in_the_stacks_table()
    invoker = invoker or BotoInvoker()
    if WorkerGaveUp.describes(event):
        return resume_or_fail(WorkerGaveUp.from_json(event), invoker)
    try:
        request = CoordinatorEvent.from_json(event)
        if request.action in STARTS:
            return _start(request, invoker).to_json()
        return _about_job(request).to_json()
    except LambdaMLError as exc:
        return {"state": "rejected", "error": str(exc)}


def _about_job(request: CoordinatorEvent) -> JobStatus:
    """Cancel the job, or only report on it: its state record."""
    job, job_id = request.job, request.job_id
    if job_id is None:
        raise ConfigError(f"'{request.action}' needs 'job' and 'job_id'")
    store = open_storage(job.storage)
    if request.action == "cancel":
        return records.cancel(store, job_id, lambda attempt: cost_so_far(store, job, job_id, attempt))
    return records.status(store, job_id)


def _start(request: CoordinatorEvent, invoker: Invoker) -> JobStatus:
    """Claim the job (or its next attempt) and invoke its workers: what the client is answered."""
    job = request.job
    stack = settings.stack_environment()
    check_fits_stack(job, stack)
    worker = request.worker_function or worker_function(job, stack)
    _, _, attempt = begin(job, request.job_id, resume=request.action == "resume")
    secret = job_secret(job)
    for rank in range(job.workers):
        invoker.invoke_async(worker, worker_event(job, attempt, rank, worker, secret=secret))
    return JobStatus(job_id=attempt.job_id, attempt=attempt.number, state=records.RUNNING)


def worker_function(job: JobSpec, stack: settings.StackEnvironment) -> str:
    """The function a job's workers run in: the torch image for torch models, the zip worker otherwise."""
    if catalogue.model(job.model.name).needs == "torch":
        if not stack.torch_worker_function:
            raise ConfigError(
                f"model {job.model.name!r} runs in the torch worker image, which this stack does not have: "
                "build functions/worker_image/ and deploy with TorchImageUri=<image URI>"
            )
        return stack.torch_worker_function
    if not stack.worker_function:
        raise ConfigError(f"no worker function: set {settings.ENV_WORKER_FUNCTION} or pass 'worker_function'")
    return stack.worker_function


def worker_event(
    job: JobSpec, attempt: Attempt, rank: int, function: str, invocation: int = 1, *, secret: bytes | None = None
) -> dict[str, Any]:
    """The payload that invokes rank ``rank`` of ``attempt`` in ``function``."""
    return WorkerEvent(job, attempt.job_id, attempt.number, rank, invocation, function, secret).to_json()


# --- worker -----------------------------------------------------------------------


def work(
    event: dict[str, Any], context: LambdaContext, *, invoker: Invoker | None = None, channel: Channel | None = None
) -> dict[str, Any]:
    """Train one rank for as long as this invocation lives."""
    global _cold
    started = time.perf_counter()
    _record_jobs_in_the_stacks_table()
    cold, _cold = _cold, False
    request = WorkerEvent.from_json(event)
    job, job_id, rank = request.job, request.job_id, request.rank
    store = open_storage(job.storage)
    attempt = records.read_attempt(store, job_id, request.attempt)
    skipped = _skipped(records.status(store, job_id), attempt)
    if skipped:
        return {"rank": rank, "status": f"skipped: {skipped}"}
    # The line ``lambdaml logs`` finds a job's invocations by: this invocation's lines are the rank's.
    log.info("%s %s rank %d attempt %d invocation %d", JOB_LOG_MARK, job_id, rank, attempt.number, request.invocation)

    runs_for = lifetime(context, job, cold=cold, started=started)
    try:
        report = _train(request, attempt, store, channel, runs_for)
    except JobCancelled:
        clear_job_channel(job, job_id, attempt.number, channel)
        return {"rank": rank, "status": "cancelled"}
    except LambdaMLError as exc:  # retrying cannot fix it: fail the job, clearly, once
        log.error("worker %d of job %s failed: %s", rank, job_id, exc)
        reason = {"reason": "diverged"} if isinstance(exc, Diverged) else {}
        cost = estimated_cost_fields(job, time.time() - attempt.started_at, "lambda", memory_mb=runs_for.memory_mb)
        error = f"worker {rank}: {exc}"
        records.set_status(store, job_id, attempt.number, records.FAILED, error=error, **reason, **cost)
        clear_job_channel(job, job_id, attempt.number, channel)
        return {"rank": rank, "status": "failed", "error": str(exc)}
    if isinstance(report, Continuation):
        function = request.worker_function or context.function_name
        (invoker or BotoInvoker()).invoke_async(function, request.next_invocation().to_json())
        return report.to_json()
    put_json(store, keys.worker_report(job_id, attempt.number, rank), report.to_json())
    return {"rank": rank, "status": _done(job, attempt, rank, store, channel)}


def _skipped(current: JobStatus, attempt: Attempt) -> str | None:
    """Why an invocation of ``attempt`` has nothing to do (a later attempt runs, or the job ended); None if it has."""
    if current.attempt != attempt.number:
        return f"attempt {attempt.number} was superseded"
    if current.state in records.ENDED:
        return f"job {current.state}"
    return None


def _train(
    request: WorkerEvent, attempt: Attempt, store: Channel, channel: Channel | None, runs_for: Lifetime
) -> WorkerReport | Continuation:
    """Run the rank, its heartbeat beating, until it finishes or this invocation's time is nearly up."""
    job, rank, invocation = request.job, request.rank, request.invocation
    if invocation > job.runtime.max_invocations:
        raise JobFailed(f"worker {rank} needed more than {job.runtime.max_invocations} invocations")
    beat = Heartbeat(
        store,
        attempt,
        invocation=invocation,
        every_s=job.runtime.heartbeat_every_s,
        final_epoch=job.algorithm.epochs,
        continued=True,  # a continuation, or a retry: the rank's record keeps its epochs so far
    )
    try:
        return run_worker(
            job,
            attempt,
            rank,
            secret=request.secret,
            on_epoch=beat,
            on_step=beat.step,
            store=store,
            channel=channel,
            lifetime=runs_for,
        )
    finally:
        beat.settle()


def _done(job: JobSpec, attempt: Attempt, rank: int, store: Channel, channel: Channel | None) -> str:
    """A rank's report is written: rank 0 finishes the job; every rank leaves the channel clean. How it ended."""
    job_id = attempt.job_id
    # A duplicate invocation of a rank can write (its end marker) after rank 0 cleared the
    # channel. Rank 0 sweeps again once the job is marked done, and a rank that finds the job
    # already done sweeps itself: whichever comes last sees the other's keys.
    if rank == 0:
        try:
            _finish_job(job, attempt, store)
        except JobCancelled:  # cancelled as it finished: the cancel stands
            clear_job_channel(job, job_id, attempt.number, channel)
            return "cancelled"
        clear_job_channel(job, job_id, attempt.number, channel)
    elif records.status(store, job_id).state != records.RUNNING:
        clear_job_channel(job, job_id, attempt.number, channel)
    return "done"


def _finish_job(job: JobSpec, attempt: Attempt, store: Channel) -> None:
    """Rank 0 gathers every rank's report into the result record."""
    reports = collect_reports(store, job, attempt)
    started = attempt.started_at
    result = assemble_result(
        job,
        attempt,
        read_manifest(store, job.dataset, attempt.dataset_version),
        reports,
        wall_s=time.time() - started,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
    )
    result = replace(result, invocations=tuple(r.invocations for r in reports))
    records.finish(store, attempt, result)
