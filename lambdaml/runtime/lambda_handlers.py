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
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from lambdaml import catalogue, keys, settings
from lambdaml.channels import Channel
from lambdaml.config import ChannelSpec, JobSpec
from lambdaml.data.shards import read_manifest
from lambdaml.errors import ConfigError, Diverged, JobCancelled, JobFailed, LambdaMLError
from lambdaml.runtime import records
from lambdaml.runtime.events import STARTS, CoordinatorEvent, WorkerEvent, WorkerGaveUp
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
#: What begins the line each worker invocation logs first: ``lambdaml job ID rank R ...``.
JOB_LOG_MARK = "lambdaml job"

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


class LambdaContext(Protocol):
    """The part of Lambda's context object the runtime reads."""

    function_name: str
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int: ...


class Invoker(Protocol):
    def invoke_async(self, function: str, payload: dict[str, Any]) -> None: ...


class BotoInvoker:
    """Asynchronous (``Event``) invocations through boto3: AWS, or the local Lambda service."""

    def __init__(self, client: Any = None, *, endpoint_url: str | None = None, region: str = "us-east-1") -> None:
        if client is None:
            from lambdaml import aws

            client = aws.client("lambda", endpoint_url=endpoint_url, region=region)
        self.client = client

    def invoke_async(self, function: str, payload: dict[str, Any]) -> None:
        self.client.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(payload).encode())


# --- coordinator ------------------------------------------------------------------


def coordinate(event: dict[str, Any], context: LambdaContext, *, invoker: Invoker | None = None) -> dict[str, Any]:
    """Start, resume, cancel or report on a job; also the on-failure destination of the workers."""
    _record_jobs_in_the_stacks_table()
    invoker = invoker or BotoInvoker()
    if WorkerGaveUp.describes(event):
        return _worker_gave_up(WorkerGaveUp.from_json(event), invoker)
    try:
        request = CoordinatorEvent.from_json(event)
        if request.action in STARTS:
            return _start(request, invoker)
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
        return records.cancel(store, job_id, lambda attempt: _cost_so_far(store, job, job_id, attempt))
    return records.status(store, job_id)


def _cost_so_far(store: Channel, job: JobSpec, job_id: str, attempt: int) -> Mapping[str, object]:
    """The cost fields of an attempt that ends here without its result: estimated from its run time so far."""
    try:
        started = records.read_attempt(store, job_id, attempt).started_at
    except LambdaMLError:  # no attempt record to time it by: recorded without a cost
        return {}
    return estimated_cost_fields(job, time.time() - started, "lambda")


def _start(request: CoordinatorEvent, invoker: Invoker) -> dict[str, Any]:
    job = request.job
    stack = settings.stack_environment()
    check_fits_stack(job, stack)
    worker = request.worker_function or worker_function(job, stack)
    _, _, attempt = begin(job, request.job_id, resume=request.action == "resume")
    secret = job_secret(job)
    for rank in range(job.workers):
        invoker.invoke_async(worker, worker_event(job, attempt, rank, worker, secret=secret))
    return {"job_id": attempt.job_id, "attempt": attempt.number, "state": "running"}


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


def check_fits_stack(job: JobSpec, stack: settings.StackEnvironment) -> None:
    """Refuse, in one line, a job whose data or channel is not this stack's (its roles reach only its own)."""
    if not stack.in_a_stack:
        return
    bind = "; start it with 'lambdaml train JOB --stack NAME', which binds it to the stack"
    if job.storage.bucket != stack.data_bucket:
        raise ConfigError(f"this stack keeps its data in {stack.data_bucket!r}, not {job.storage.bucket!r}{bind}")
    _check_channel_fits(job.channel, stack, bind)


def _check_channel_fits(channel: ChannelSpec, stack: settings.StackEnvironment, bind: str) -> None:
    """What the channel kind's description says a stack provides, held against the job's channel."""
    kind, info = channel.kind, catalogue.channel(channel.kind)
    if not info.connects_processes:
        shared = catalogue.shared_channels()
        use = " or ".join([", ".join(shared[:-1]), shared[-1]]) if len(shared) > 1 else "".join(shared)
        raise ConfigError(f"the {info.called} channel cannot connect Lambda workers; use {use}")
    for provided in info.stack_fields:
        value, expected = getattr(channel, provided.field), stack.output(provided.output)
        if value != expected:
            raise ConfigError(f"this stack's {provided.named} {expected!r}, not {value!r}{bind}")
    if info.stack_cache and stack.cache_kind is None:
        raise ConfigError(
            f"the job's channel is {kind}, but this stack has no cache; deploy it with one "
            f"(a local stack: lambdaml local up --cache {kind})"
        )
    if info.stack_cache and kind != stack.cache_kind:
        raise ConfigError(f"the job's channel is {kind}, but this stack's cache is {stack.cache_kind}")


def worker_event(
    job: JobSpec, attempt: Attempt, rank: int, function: str, invocation: int = 1, *, secret: bytes | None = None
) -> dict[str, Any]:
    """The payload that invokes rank ``rank`` of ``attempt`` in ``function``."""
    return WorkerEvent(job, attempt.job_id, attempt.number, rank, invocation, function, secret).to_json()


# Worker errors that the same code and memory meet again on every try: resuming cannot help.
_PERMANENT_ERRORS = frozenset(
    {
        "Runtime.ImportModuleError",
        "Runtime.HandlerNotFound",
        "Runtime.UserCodeSyntaxError",
        "Runtime.OutOfMemory",
        "ImportError",
        "ModuleNotFoundError",
        "SyntaxError",
    }
)


def _worker_gave_up(failure: WorkerGaveUp, invoker: Invoker) -> dict[str, Any]:
    """AWS retried a worker twice and it still crashed: resume it from its checkpoint, unless it cannot help."""
    request = failure.request
    job, job_id, rank, invocation = request.job, request.job_id, request.rank, request.invocation
    store = open_storage(job.storage)
    current = records.status(store, job_id)
    live = current.state == records.RUNNING and current.attempt == request.attempt
    permanent = failure.error_type in _PERMANENT_ERRORS
    if invocation >= job.runtime.max_invocations or not live or permanent or not request.worker_function:
        error = f"worker {rank} kept failing (invocation {invocation})"
        if failure.error_type:
            error += f": {failure.error_type}: {' '.join(failure.error_message.split())}"
        if failure.error_type == "Runtime.OutOfMemory":
            error += "; give the workers more memory (WorkerMemoryMB) or use more of them"
        cost = _cost_so_far(store, job, job_id, request.attempt)
        # guarded: never over an ending
        records.set_status(store, job_id, request.attempt, records.FAILED, error=error, **cost)
        return {"job_id": job_id, "state": "failed"}
    invoker.invoke_async(request.worker_function, request.next_invocation().to_json())
    return {"job_id": job_id, "state": "running", "resumed_rank": rank}


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

    lifetime = Lifetime(
        cold=cold,
        memory_mb=int(getattr(context, "memory_limit_in_mb", 0) or 0),
        architecture=settings.stack_environment().architecture,
        started=started,
        remaining_s=lambda: context.get_remaining_time_in_millis() / 1000.0,
        margin_s=job.runtime.margin_s,
        checkpoint_every=job.runtime.checkpoint_every,
    )
    try:
        report = _train(request, attempt, store, channel, lifetime)
    except JobCancelled:
        clear_job_channel(job, job_id, attempt.number, channel)
        return {"rank": rank, "status": "cancelled"}
    except LambdaMLError as exc:  # retrying cannot fix it: fail the job, clearly, once
        log.error("worker %d of job %s failed: %s", rank, job_id, exc)
        reason = {"reason": "diverged"} if isinstance(exc, Diverged) else {}
        cost = estimated_cost_fields(job, time.time() - attempt.started_at, "lambda", memory_mb=lifetime.memory_mb)
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
    request: WorkerEvent, attempt: Attempt, store: Channel, channel: Channel | None, lifetime: Lifetime
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
            lifetime=lifetime,
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
