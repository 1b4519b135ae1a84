"""A worker Lambda gave up on: Lambda retries a failed asynchronous event twice, then sends its
on-failure destination (the coordinator) a record of it. The coordinator resumes the rank from
its checkpoint, unless resuming cannot help: then the job fails, saying why."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from lambdaml.channels import Channel
from lambdaml.config import JobSpec
from lambdaml.errors import LambdaMLError
from lambdaml.platforms.aws_lambda.invoke import Invoker
from lambdaml.runtime import records
from lambdaml.runtime.events import WorkerEvent
from lambdaml.runtime.results import estimated_cost_fields
from lambdaml.storage import open_storage

#: Lambda's error types that the same code and memory meet again on every try: resuming cannot help.
PERMANENT_ERRORS = frozenset(
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
OUT_OF_MEMORY = "Runtime.OutOfMemory"


@dataclass(frozen=True)
class WorkerGaveUp:
    """Lambda's on-failure record for a worker event it retried and gave up on:
    ``{"requestContext", "requestPayload": <worker event>, "responsePayload"?: {"errorType", "errorMessage"}}``."""

    request: WorkerEvent
    error_type: str = ""
    error_message: str = ""

    @staticmethod
    def describes(data: object) -> bool:
        """Whether an event the coordinator received is such a record, not a request of its own."""
        return isinstance(data, dict) and "requestPayload" in data and "requestContext" in data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> WorkerGaveUp:
        request = WorkerEvent.from_json(data["requestPayload"], "failed worker event")
        response = data.get("responsePayload")  # the worker's error, where it returned one
        if not isinstance(response, dict):
            return cls(request)
        return cls(request, str(response.get("errorType", "")), str(response.get("errorMessage", "")))

    @property
    def error(self) -> str:
        """What the job's record says of it."""
        request = self.request
        error = f"worker {request.rank} kept failing (invocation {request.invocation})"
        if self.error_type:
            error += f": {self.error_type}: {' '.join(self.error_message.split())}"
        if self.error_type == OUT_OF_MEMORY:
            error += "; give the workers more memory (WorkerMemoryMB) or use more of them"
        return error


def cost_so_far(store: Channel, job: JobSpec, job_id: str, attempt: int) -> Mapping[str, object]:
    """The cost fields of an attempt that ends here without its result (a worker given up on, a
    cancel): estimated from its run time so far."""
    try:
        started = records.read_attempt(store, job_id, attempt).started_at
    except LambdaMLError:  # no attempt record to time it by: recorded without a cost
        return {}
    return estimated_cost_fields(job, time.time() - started, "lambda")


def resume_or_fail(failure: WorkerGaveUp, invoker: Invoker) -> dict[str, object]:
    """Resume the rank from its checkpoint in a new invocation, unless it cannot help: the attempt
    ended or was superseded, the error is permanent, or the rank used up its invocations. The answer."""
    request = failure.request
    job, job_id = request.job, request.job_id
    store = open_storage(job.storage)
    current = records.status(store, job_id)
    live = current.state == records.RUNNING and current.attempt == request.attempt
    permanent = failure.error_type in PERMANENT_ERRORS
    if request.invocation >= job.runtime.max_invocations or not live or permanent or not request.worker_function:
        cost = cost_so_far(store, job, job_id, request.attempt)
        # guarded: never over an ending
        records.set_status(store, job_id, request.attempt, records.FAILED, error=failure.error, **cost)
        return {"job_id": job_id, "state": "failed"}
    invoker.invoke_async(request.worker_function, request.next_invocation().to_json())
    return {"job_id": job_id, "state": "running", "resumed_rank": request.rank}
