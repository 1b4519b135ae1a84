"""What the Lambda functions do; the handlers in ``functions/`` only call these.

The coordinator validates a job, records it and fans out W asynchronous worker
invocations. A worker trains its rank until it finishes, or until its deadline is near:
then it checkpoints and invokes itself again. Failures follow Lambda's rules: an
unexpected crash raises, so AWS retries the event and the retry resumes from the last
checkpoint; a failure that retrying cannot fix (another worker gone, bad data) marks the
job failed and returns. Everything a user watches (status, heartbeats, reports, result)
is a JSON record in the data bucket.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Protocol

from lambdaml import keys, settings
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, parse_job
from lambdaml.data.shards import read_manifest
from lambdaml.errors import ConfigError, Diverged, JobCancelled, JobFailed, KeyNotFound, LambdaMLError
from lambdaml.runtime.job import assemble_result, clear_job_channel, collect_reports, new_job_id, preflight
from lambdaml.runtime.worker import Lifetime, run_worker
from lambdaml.storage import get_json, open_storage, put_json

log = logging.getLogger(__name__)

# True until this process has served one worker invocation: Lambda reuses warm processes,
# so the first invocation in a process is the cold start.
_cold = True


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


def _status(store: Channel, job_id: str) -> dict[str, Any]:
    try:
        status: dict[str, Any] = get_json(store, keys.job_status(job_id))
    except KeyNotFound:
        return {"job_id": job_id, "state": "unknown"}
    return status


def _set_status(store: Channel, job_id: str, state: str, **fields: Any) -> None:
    status = _status(store, job_id)
    ended = status.get("state")
    if ended == "succeeded" or (ended in ("failed", "cancelled") and state != "cancelled"):
        return  # the first ending reported stands; a cancel's stragglers (or a late duplicate) time out into it
    status.update(fields, state=state, updated_at=time.time())
    put_json(store, keys.job_status(job_id), status)


# --- coordinator ------------------------------------------------------------------


def coordinate(event: dict[str, Any], context: LambdaContext, *, invoker: Invoker | None = None) -> dict[str, Any]:
    """Start, cancel or report on a job; also the on-failure destination of the workers."""
    invoker = invoker or BotoInvoker()
    if "requestPayload" in event and "requestContext" in event:
        return _worker_gave_up(event, invoker)
    action = event.get("action", "start")
    try:
        if action == "start":
            return _start(event, invoker)
        job = parse_job(event["job"], "job") if "job" in event else None
        store = open_storage(job.storage) if job else None
        if store is None or "job_id" not in event:
            raise ConfigError(f"'{action}' needs 'job' and 'job_id'")
        if action not in ("cancel", "status"):
            raise ConfigError(f"unknown action {action!r}; known: start, cancel, status")
        if action == "cancel" and _status(store, event["job_id"]).get("state") == "running":
            store.put(keys.job_cancel(event["job_id"]), b"1")
            _set_status(store, event["job_id"], "cancelled")
        return _status(store, event["job_id"])
    except LambdaMLError as exc:
        return {"state": "rejected", "error": str(exc)}


def _start(event: dict[str, Any], invoker: Invoker) -> dict[str, Any]:
    job = parse_job(event.get("job"), "job")
    job_id = event.get("job_id") or new_job_id(job.name)
    keys.check_name(job_id, "job id")
    store, _ = preflight(job)
    worker = event.get("worker_function") or os.environ.get(settings.ENV_WORKER_FUNCTION)
    if not worker:
        raise ConfigError(f"no worker function: set {settings.ENV_WORKER_FUNCTION} or pass 'worker_function'")
    put_json(store, keys.job_spec(job_id), job.model_dump(mode="json"))
    put_json(
        store,
        keys.job_status(job_id),
        {"job_id": job_id, "state": "running", "workers": job.workers, "started_at": time.time()},
    )
    for rank in range(job.workers):
        invoker.invoke_async(worker, worker_event(job, job_id, rank, worker))
    return {"job_id": job_id, "state": "running"}


def worker_event(job: JobSpec, job_id: str, rank: int, function: str, invocation: int = 1) -> dict[str, Any]:
    return {
        "job": job.model_dump(mode="json"),
        "job_id": job_id,
        "rank": rank,
        "invocation": invocation,
        "worker_function": function,
    }


def _worker_gave_up(record: dict[str, Any], invoker: Invoker) -> dict[str, Any]:
    """AWS retried a worker twice and it still crashed: resume it once more from its checkpoint."""
    payload = record["requestPayload"]
    job = parse_job(payload["job"], "job")
    store = open_storage(job.storage)
    job_id, rank, invocation = payload["job_id"], payload["rank"], int(payload.get("invocation", 1))
    if invocation >= job.runtime.max_invocations or _status(store, job_id).get("state") != "running":
        _set_status(store, job_id, "failed", error=f"worker {rank} kept failing (invocation {invocation})")
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
    cold, _cold = _cold, False
    job = parse_job(event["job"], "job")
    job_id, rank, invocation = event["job_id"], int(event["rank"]), int(event.get("invocation", 1))
    store = open_storage(job.storage)
    state = _status(store, job_id).get("state")
    if state in ("failed", "cancelled", "succeeded"):
        return {"rank": rank, "status": f"skipped: job {state}"}

    def heartbeat(r: int, epoch: int, loss: float, elapsed: float) -> None:
        record = {"rank": r, "epoch": epoch, "loss": loss, "elapsed_s": elapsed, "invocation": invocation}
        put_json(store, keys.worker_heartbeat(job_id, r), {**record, "state": "running", "at": time.time()})
        if store.get_many([keys.job_cancel(job_id)]):
            raise JobCancelled(f"job {job_id} was cancelled")

    lifetime = Lifetime(
        cold=cold,
        memory_mb=int(getattr(context, "memory_limit_in_mb", 0) or 0),
        started=started,
        remaining_s=lambda: context.get_remaining_time_in_millis() / 1000.0,
        margin_s=job.runtime.margin_s,
        checkpoint_every=job.runtime.checkpoint_every,
    )
    try:
        if invocation > job.runtime.max_invocations:
            raise JobFailed(f"worker {rank} needed more than {job.runtime.max_invocations} invocations")
        report = run_worker(job, job_id, rank, on_epoch=heartbeat, store=store, channel=channel, lifetime=lifetime)
    except JobCancelled:
        clear_job_channel(job, job_id, channel)
        return {"rank": rank, "status": "cancelled"}
    except LambdaMLError as exc:  # retrying cannot fix it: fail the job, clearly, once
        log.error("worker %d of job %s failed: %s", rank, job_id, exc)
        reason = {"reason": "diverged"} if isinstance(exc, Diverged) else {}
        _set_status(store, job_id, "failed", error=f"worker {rank}: {exc}", **reason)
        clear_job_channel(job, job_id, channel)
        return {"rank": rank, "status": "failed", "error": str(exc)}
    if report["status"] == "continued":
        function = event.get("worker_function") or context.function_name
        (invoker or BotoInvoker()).invoke_async(function, {**event, "invocation": invocation + 1})
        return report
    put_json(store, keys.worker_report(job_id, rank), report)
    # A duplicate invocation of a rank can write (its end marker) after rank 0 cleared the
    # channel. Rank 0 sweeps again once the job is marked done, and a rank that finds the job
    # already done sweeps itself: whichever comes last sees the other's keys.
    if rank == 0:
        _finish_job(job, job_id, store)
        clear_job_channel(job, job_id, channel)
    elif _status(store, job_id).get("state") != "running":
        clear_job_channel(job, job_id, channel)
    return {"rank": rank, "status": "done"}


def _finish_job(job: JobSpec, job_id: str, store: Channel) -> None:
    """Rank 0 gathers every rank's report into the result record."""
    reports = collect_reports(store, job, job_id)
    status = _status(store, job_id)
    started = float(status.get("started_at", time.time()))
    result = assemble_result(
        job,
        job_id,
        read_manifest(store, job.dataset),
        reports,
        wall_s=time.time() - started,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
    )
    result["invocations"] = [r.get("invocations", 1) for r in reports]
    put_json(store, keys.job_result(job_id), result)
    _set_status(store, job_id, "succeeded", finished_at=time.time())
