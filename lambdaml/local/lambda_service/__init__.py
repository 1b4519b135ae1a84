"""A local AWS Lambda service: the Invoke API on loopback, handlers run by AWS's runtime interface client.

boto3 code written for AWS works unchanged against it (``endpoint_url=service.url``): moto
records Lambda functions but cannot run them without Docker, so this service runs them.

How it works, module by module (moto's per-service layout):

- **Invoke API** (invoke, routing): ``POST /2015-03-31/functions/{name}/invocations`` with
  ``RequestResponse`` (200, ``X-Amz-Function-Error: Unhandled`` on a function error),
  ``Event`` (202, queued and retried) and ``DryRun`` (204); unknown functions give 404
  ``ResourceNotFoundException`` and a function at its concurrency limit gives 429
  ``TooManyRequestsException``, as on AWS. Operations are a table of (method, path) routes.
- **Execution environments** ("sandboxes"; sandboxes, processes, functions): one
  ``python -m awslambdaric module.func`` process each, serving one invocation at a time and
  kept warm for the next. Each function has a pool that reuses an idle sandbox or starts a
  new one while the account's concurrency allows (concurrency): a function with
  ``reserved_concurrency`` has that many busy sandboxes at most, and the others share what
  is left of ``max_concurrency``, as Lambda counts concurrent executions.
- **Control plane** (control_api): ListFunctions, GetFunction, GetFunctionConfiguration,
  Get/Put/DeleteFunctionConcurrency and GetAccountSettings, with AWS's paths and shapes.
- **Runtime API routing** (runtime_api, frontend): every sandbox polls the Runtime API on a
  loopback port of its own, so the port says which process is asking. All listening
  sockets (Invoke API and runtime ports) are served by one selector thread, which hands
  each connection to a short-lived handler thread.
- **Limits** (execution, memory): the timeout is enforced by the waiting caller (the sandbox
  is killed and the caller gets ``Sandbox.Timedout``); memory by sampling the resident set
  of the sandbox's process tree and killing it above ``memory_mb`` (``Runtime.OutOfMemory``).
- **Async** (async_delivery): an ``Event`` invocation keeps its request id across retries;
  after ``1 + max_retry_attempts`` failed attempts an AWS-shaped invocation record goes to
  the ``on_failure`` destination (a callable, or another function invoked asynchronously).
- **Invocation log** (records): one :class:`InvocationRecord` per attempt (cold or warm,
  duration, billed duration, memory, status), from :meth:`LambdaService.invocations` and as
  JSON lines in ``invocations.jsonl``; handler output goes to ``<function>.log`` with
  START/END/REPORT lines in CloudWatch's format.

:class:`LambdaService` (service) composes these parts; models and responses hold the data
and the response shapes they share.
"""

from lambdaml.local.lambda_service.models import (
    ASYNC_PAYLOAD_LIMIT,
    DEFAULT_ACCOUNT_ID,
    LATEST,
    MAX_TIMEOUT_S,
    SYNC_PAYLOAD_LIMIT,
    TAIL_BYTES,
    FunctionConfig,
    InvocationRecord,
    LambdaServiceError,
    OnFailure,
)
from lambdaml.local.lambda_service.service import LambdaService

__all__ = [
    "ASYNC_PAYLOAD_LIMIT",
    "DEFAULT_ACCOUNT_ID",
    "LATEST",
    "MAX_TIMEOUT_S",
    "SYNC_PAYLOAD_LIMIT",
    "TAIL_BYTES",
    "FunctionConfig",
    "InvocationRecord",
    "LambdaService",
    "LambdaServiceError",
    "OnFailure",
]
