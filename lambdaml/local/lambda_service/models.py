"""What the local Lambda service is about: functions, attempts and their records, shared limits.

``FunctionConfig`` is what template.yaml declares for a function; an ``Attempt`` is one
execution of an invocation on one sandbox, and an ``InvocationRecord`` is what is kept of it
for cost accounting. The constants are AWS's payload and timeout limits and the service's
own wait bounds, which several modules share.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

from lambdaml.errors import ConfigError, LambdaMLError


class FailureRecord(TypedDict):
    """The invocation record Lambda sends an on-failure destination after an event's last failed try."""

    version: str
    timestamp: str
    requestContext: dict[str, str | int]  # requestId, functionArn, condition, approximateInvokeCount
    requestPayload: object  # the event: its JSON, or its text where it is not JSON
    responseContext: dict[str, str | int]  # statusCode, executedVersion, functionError
    responsePayload: object  # the function's error, likewise


#: Where an event goes once its tries are spent: a callable, another function's name, or nowhere.
OnFailure = Callable[[FailureRecord], None] | str | None

DEFAULT_ACCOUNT_ID = "123456789012"
LATEST = "$LATEST"
SYNC_PAYLOAD_LIMIT = 6 * 1024 * 1024  # RequestResponse request and response payloads
ASYNC_PAYLOAD_LIMIT = 1024 * 1024  # Event payloads (AWS raised this from 256 KB to 1 MB in 2025)
MAX_TIMEOUT_S = 900.0
TAIL_BYTES = 4096  # X-Amz-Log-Result carries the last 4 KB of the log

IDLE_WAIT_S = 60.0  # re-check interval of otherwise unbounded waits (every wake-up is notified)
JOIN_S = 5.0  # longest wait for a thread to end at stop

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_RESERVED_ENV = frozenset(
    {
        "_HANDLER",
        "AWS_REGION",
        "AWS_EXECUTION_ENV",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_INITIALIZATION_TYPE",
        "AWS_LAMBDA_LOG_GROUP_NAME",
        "AWS_LAMBDA_LOG_STREAM_NAME",
        "AWS_LAMBDA_RUNTIME_API",
        "LAMBDA_TASK_ROOT",
        "LAMBDA_RUNTIME_DIR",
    }
)


class LambdaServiceError(LambdaMLError):
    """The local Lambda service failed (not a function error: those are returned like AWS does)."""


class Stopping(Exception):
    """The service is stopping; the pending work is dropped."""


@dataclass(frozen=True)
class FunctionConfig:
    """One Lambda function: its code, limits and async error handling (what template.yaml declares)."""

    name: str
    handler: str  # "module.function", imported from code_dir
    code_dir: str | os.PathLike[str]
    timeout_s: float = 3.0
    memory_mb: int = 128
    environment: Mapping[str, str] = field(default_factory=dict)
    reserved_concurrency: int | None = None
    max_retry_attempts: int = 2  # retries of a failed Event invocation (AWS: 0..2, default 2)
    on_failure: OnFailure = None  # after the last failed Event attempt: a callable or a function name
    # What GetFunction reports; the service runs every function in the interpreter it was given.
    runtime: str = "python3.11"
    architecture: str = "x86_64"
    description: str = ""
    role: str = ""
    log_group: str = ""  # its LoggingConfig's group; Lambda's default is /aws/lambda/<name>
    layers: tuple[str, ...] = ()  # folders on sys.path after the task root (Lambda's /opt/python)

    @property
    def log_group_name(self) -> str:
        return self.log_group or f"/aws/lambda/{self.name}"

    def __post_init__(self) -> None:
        where = f"function {self.name!r}"
        if not _NAME.match(self.name):
            raise ConfigError(f"{where}: name must be 1-64 letters, digits, '-' or '_'")
        module, _, func = self.handler.rpartition(".")
        if not module or not func:
            raise ConfigError(f"{where}: handler must be 'module.function', got {self.handler!r}")
        if not Path(self.code_dir).is_dir():
            raise ConfigError(f"{where}: code_dir {os.fspath(self.code_dir)!r} is not a directory")
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ConfigError(f"{where}: timeout_s must be in (0, {MAX_TIMEOUT_S:g}]")
        if not 128 <= self.memory_mb <= 10240:
            raise ConfigError(f"{where}: memory_mb must be in [128, 10240]")
        if self.reserved_concurrency is not None and self.reserved_concurrency < 0:
            raise ConfigError(f"{where}: reserved_concurrency must be >= 0")
        if self.architecture not in ("x86_64", "arm64"):
            raise ConfigError(f"{where}: architecture must be x86_64 or arm64")
        if not 0 <= self.max_retry_attempts <= 2:
            raise ConfigError(f"{where}: max_retry_attempts must be 0, 1 or 2")
        reserved = sorted(_RESERVED_ENV.intersection(self.environment))
        if reserved:
            raise ConfigError(f"{where}: environment sets reserved variables {reserved}")


@dataclass(frozen=True)
class InvocationRecord:
    """One execution attempt, for cost accounting (an Event retry is a second record, same request id)."""

    request_id: str
    function: str
    invocation_type: str  # RequestResponse or Event
    attempt: int  # 1 for the first try, 2 and 3 for async retries
    pid: int | None
    cold: bool
    start: float  # epoch seconds the handler got the event (or was assigned, if it never did)
    end: float
    duration_ms: float
    init_duration_ms: float | None  # cold starts: process start until the runtime first polled
    billed_duration_ms: int  # ceil(duration + init): AWS bills the init phase since August 2025
    memory_mb: int
    max_memory_used_mb: int | None  # peak RSS of the runtime process so far (VmHWM)
    status: str  # success, error, timeout, crash, oom, init_error
    error_type: str | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Attempt:
    """One execution of an invocation on one sandbox; guarded by that sandbox's condition."""

    def __init__(
        self,
        request_id: str,
        fn: FunctionConfig,
        payload: bytes,
        invocation_type: str,
        attempt: int,
        client_context: str | None = None,
        want_tail: bool = False,
    ) -> None:
        self.request_id = request_id
        self.fn = fn
        self.payload = payload
        self.invocation_type = invocation_type
        self.attempt = attempt
        self.client_context = client_context
        self.tail: deque[bytes] | None = deque(maxlen=256) if want_tail else None
        self.cold = False
        self.assigned_mono = 0.0
        self.assigned_wall = 0.0
        self.delivered = False
        self.start_mono = 0.0
        self.start_wall = 0.0
        self.deadline_mono = 0.0
        self.finished = False
        self.end_mono = 0.0
        self.status = ""
        self.result = b""
        self.error_type: str | None = None

    def finish(self, status: str, result: bytes, error_type: str | None = None) -> bool:
        """Settle the outcome once; later reports (a response after a timeout) are ignored."""
        if self.finished:
            return False
        self.finished, self.status, self.result, self.error_type = True, status, result, error_type
        self.end_mono = time.monotonic()
        return True

    @property
    def failed(self) -> bool:
        return self.status != "success"
