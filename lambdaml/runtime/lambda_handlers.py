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
from dataclasses import replace
from typing import Any, Protocol

from lambdaml import catalogue, keys, settings
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, parse_job
from lambdaml.data.shards import read_manifest
from lambdaml.errors import ConfigError, Diverged, JobCancelled, JobFailed, LambdaMLError
from lambdaml.runtime import records
from lambdaml.runtime.heartbeat import Heartbeat
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.registry import TableRegistry
from lambdaml.runtime.reports import Continuation
from lambdaml.runtime.results import assemble_result, clear_job_channel, collect_reports, estimated_cost_fields
from lambdaml.runtime.start import begin, job_secret
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

        records.also_record_in(TableRegistry(aws.client("dynamodb"), table))


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
    if "requestPayload" in event and "requestContext" in event:
        return _worker_gave_up(event, invoker)
    action = event.get("action", "start")
    try:
        if action in ("start", "resume"):
            return _start(event, invoker, resume=action == "resume")
        job = parse_job(event["job"], "job") if "job" in event else None
        store = open_storage(job.storage) if job else None
        if job is None or store is None or "job_id" not in event:
            raise ConfigError(f"'{action}' needs 'job' and 'job_id'")
        if action not in ("cancel", "status"):
            raise ConfigError(f"unknown action {action!r}; known: start, resume, cancel, status")
        job_id = keys.check_name(event["job_id"], "job id")
        current = records.status(store, job_id)
        if action == "cancel" and current.get("state") == records.RUNNING:
            attempt = int(current.get("attempt", 1))
            store.put(keys.job_cancel(job_id, attempt), b"1")
            records.set_status(store, job_id, attempt, records.CANCELLED, **_cost_so_far(store, job, job_id, attempt))
        return records.status(store, job_id)
    except LambdaMLError as exc:
        return {"state": "rejected", "error": str(exc)}


def _cost_so_far(store: Channel, job: JobSpec, job_id: str, attempt: int) -> dict[str, Any]:
    """The cost fields of an attempt that ends here without its result: estimated from its run time so far."""
    try:
        started = records.read_attempt(store, job_id, attempt).started_at
    except LambdaMLError:  # no attempt record to time it by: recorded without a cost
        return {}
    return estimated_cost_fields(job, time.time() - started, "lambda")


def _start(event: dict[str, Any], invoker: Invoker, *, resume: bool) -> dict[str, Any]:
    job = parse_job(event.get("job"), "job")
    stack = settings.stack_environment()
    check_fits_stack(job, stack)
    worker = event.get("worker_function") or worker_function(job, stack)
    _, _, attempt = begin(job, event.get("job_id"), resume=resume)
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
    channel = job.channel
    bind = "; start it with 'lambdaml train JOB --stack NAME', which binds it to the stack"
    if job.storage.bucket != stack.data_bucket:
        raise ConfigError(f"this stack keeps its data in {stack.data_bucket!r}, not {job.storage.bucket!r}{bind}")
    if channel.kind == "s3" and channel.bucket != stack.comm_bucket:
        raise ConfigError(f"this stack's S3 channel is bucket {stack.comm_bucket!r}, not {channel.bucket!r}{bind}")
    if channel.kind == "dynamodb" and channel.table != stack.channel_table:
        raise ConfigError(f"this stack's channel table is {stack.channel_table!r}, not {channel.table!r}{bind}")
    if channel.kind in ("redis", "memcached"):
        if stack.cache_kind is None:
            raise ConfigError(
                f"the job's channel is {channel.kind}, but this stack has no cache; deploy it with one "
                f"(a local stack: lambdaml local up --cache {channel.kind})"
            )
        if channel.kind != stack.cache_kind:
            raise ConfigError(f"the job's channel is {channel.kind}, but this stack's cache is {stack.cache_kind}")
    if channel.kind == "memory":
        raise ConfigError("the in-memory channel cannot connect Lambda workers; use s3, redis, memcached or dynamodb")


def worker_event(
    job: JobSpec, attempt: Attempt, rank: int, function: str, invocation: int = 1, *, secret: bytes | None = None
) -> dict[str, Any]:
    return {
        "job": job.model_dump(mode="json"),
        "job_id": attempt.job_id,
        "attempt": attempt.number,
        "rank": rank,
        "invocation": invocation,
        "worker_function": function,
        "seal_key": secret.hex() if secret is not None else None,
    }


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


def _worker_gave_up(record: dict[str, Any], invoker: Invoker) -> dict[str, Any]:
    """AWS retried a worker twice and it still crashed: resume it from its checkpoint, unless it cannot help."""
    payload = record["requestPayload"]
    job = parse_job(payload["job"], "job")
    store = open_storage(job.storage)
    job_id, rank, invocation = payload["job_id"], payload["rank"], int(payload.get("invocation", 1))
    attempt = int(payload.get("attempt", 1))
    current = records.status(store, job_id)
    live = current.get("state") == records.RUNNING and int(current.get("attempt", 1)) == attempt
    response = record.get("responsePayload")
    error_type = str(response.get("errorType", "")) if isinstance(response, dict) else ""
    message = str(response.get("errorMessage", "")) if isinstance(response, dict) else ""
    permanent = error_type in _PERMANENT_ERRORS
    if invocation >= job.runtime.max_invocations or not live or permanent:
        error = f"worker {rank} kept failing (invocation {invocation})"
        if error_type:
            error += f": {error_type}: {' '.join(message.split())}"
        if error_type == "Runtime.OutOfMemory":
            error += "; give the workers more memory (WorkerMemoryMB) or use more of them"
        cost = _cost_so_far(store, job, job_id, attempt)
        records.set_status(store, job_id, attempt, records.FAILED, error=error, **cost)  # guarded: never over an ending
        return {"job_id": job_id, "state": "failed"}
    invoker.invoke_async(payload["worker_function"], {**payload, "invocation": invocation + 1})
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
    job = parse_job(event["job"], "job")
    job_id, rank, invocation = event["job_id"], int(event["rank"]), int(event.get("invocation", 1))
    store = open_storage(job.storage)
    attempt = records.read_attempt(store, job_id, int(event.get("attempt", 1)))
    current = records.status(store, job_id)
    if int(current.get("attempt", 1)) != attempt.number:
        return {"rank": rank, "status": f"skipped: attempt {attempt.number} was superseded"}
    state = current.get("state")
    if state in records.ENDED:
        return {"rank": rank, "status": f"skipped: job {state}"}
    secret = bytes.fromhex(event["seal_key"]) if event.get("seal_key") else None
    # The line ``lambdaml logs`` finds a job's invocations by: this invocation's lines are the rank's.
    log.info("%s %s rank %d attempt %d invocation %d", JOB_LOG_MARK, job_id, rank, attempt.number, invocation)

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
            report = run_worker(
                job,
                attempt,
                rank,
                secret=secret,
                on_epoch=beat,
                on_step=beat.step,
                store=store,
                channel=channel,
                lifetime=lifetime,
            )
        finally:
            beat.settle()
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
        function = event.get("worker_function") or context.function_name
        (invoker or BotoInvoker()).invoke_async(function, {**event, "invocation": invocation + 1})
        return report.to_json()
    put_json(store, keys.worker_report(job_id, attempt.number, rank), report.to_json())
    # A duplicate invocation of a rank can write (its end marker) after rank 0 cleared the
    # channel. Rank 0 sweeps again once the job is marked done, and a rank that finds the job
    # already done sweeps itself: whichever comes last sees the other's keys.
    if rank == 0:
        try:
            _finish_job(job, attempt, store)
        except JobCancelled:  # cancelled as it finished: the cancel stands
            clear_job_channel(job, job_id, attempt.number, channel)
            return {"rank": rank, "status": "cancelled"}
        clear_job_channel(job, job_id, attempt.number, channel)
    elif records.status(store, job_id).get("state") != records.RUNNING:
        clear_job_channel(job, job_id, attempt.number, channel)
    return {"rank": rank, "status": "done"}


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
