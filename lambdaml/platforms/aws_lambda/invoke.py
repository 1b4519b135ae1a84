"""Invoking a stack's functions: asynchronously (a worker, which Lambda retries and then hands to its
on-failure destination), or synchronously (the coordinator, whose answer the caller waits for)."""

from __future__ import annotations

import json
from typing import Any, Protocol

from lambdaml import aws
from lambdaml.errors import JobFailed
from lambdaml.platforms.aws_lambda.outputs import COORDINATOR, StackOutputs
from lambdaml.runtime.events import STARTS, CoordinatorEvent
from lambdaml.runtime.status import JobStatus

#: How long a start may take (the coordinator claims the job and invokes every worker): Lambda's limit.
START_TIMEOUT_S = 900


class Invoker(Protocol):
    """Asynchronous invocations: the payload is the function's event, as Lambda delivers it."""

    def invoke_async(self, function: str, payload: dict[str, Any]) -> None: ...


class BotoInvoker:
    """Asynchronous (``Event``) invocations through boto3: AWS, or the local Lambda service."""

    def __init__(self, client: Any = None, *, endpoint_url: str | None = None, region: str = "us-east-1") -> None:
        self.client = client if client is not None else aws.client("lambda", endpoint_url=endpoint_url, region=region)

    def invoke_async(self, function: str, payload: dict[str, Any]) -> None:
        self.client.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(payload).encode())


def invoke(client: Any, function: str, payload: dict[str, Any]) -> object:
    """Invoke a function and wait: its answer, as JSON; a JobFailed where the function raised
    (Lambda's ``FunctionError``, with the ``errorType`` and ``errorMessage`` of its answer)."""
    response = client.invoke(
        FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(payload).encode()
    )
    answer: object = json.loads(response["Payload"].read() or b"{}")
    if response.get("FunctionError"):
        error = answer if isinstance(answer, dict) else {}
        raise JobFailed(f"{function} failed: {error.get('errorType', 'error')}: {error.get('errorMessage', answer)}")
    return answer


def call_coordinator(stack: StackOutputs, event: CoordinatorEvent) -> JobStatus:
    """The stack's coordinator's answer to ``event``: the job's state record (a start's names the job
    and its attempt; a refusal's state is "rejected", with the error)."""
    if event.action in STARTS:  # one try: a retry would start the job twice; a start may take long
        client = stack.client("lambda", read_timeout_s=START_TIMEOUT_S, max_attempts=1)
    else:
        client = stack.client("lambda")
    answer = invoke(client, stack.output(COORDINATOR), event.to_json())
    return JobStatus.from_json(answer, event.job_id or "", "the coordinator's answer")
