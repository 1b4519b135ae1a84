"""``LambdaService``: the local Lambda service, composed of its parts and their lifecycle.

It owns the registry of functions, the invocation log, the HTTP front, the sandbox
machinery (spawner, memory watcher, executor), the Runtime and Invoke APIs and async
delivery; it wires them together, starts and stops them, and offers the Python API the
local stack and the tests use (functions, prewarming, records, waiting for async work).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from lambdaml.errors import ConfigError
from lambdaml.local.lambda_service.async_delivery import AsyncDelivery
from lambdaml.local.lambda_service.cloudwatch import LogShipper
from lambdaml.local.lambda_service.concurrency import Concurrency
from lambdaml.local.lambda_service.control_api import ControlApi
from lambdaml.local.lambda_service.execution import Executor
from lambdaml.local.lambda_service.frontend import Frontend
from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.invoke import InvokeApi
from lambdaml.local.lambda_service.memory import MemoryWatcher
from lambdaml.local.lambda_service.models import (
    DEFAULT_ACCOUNT_ID,
    JOIN_S,
    FunctionConfig,
    InvocationRecord,
    LambdaServiceError,
    Stopping,
)
from lambdaml.local.lambda_service.processes import Spawner
from lambdaml.local.lambda_service.records import InvocationLog
from lambdaml.local.lambda_service.routing import Router
from lambdaml.local.lambda_service.runtime_api import RuntimeApi
from lambdaml.local.lambda_service.sandboxes import Sandbox

log = logging.getLogger(__name__)


class LambdaService:
    """The Invoke API on loopback, executing handlers with awslambdaric; see the package docstring."""

    def __init__(
        self,
        functions: Iterable[FunctionConfig] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        region: str = "us-east-1",
        account_id: str = DEFAULT_ACCOUNT_ID,
        max_concurrency: int = 64,
        unreserved_minimum: int = 0,
        retry_delays_s: Sequence[float] = (1.0, 2.0),
        init_timeout_s: float = 30.0,
        enforce_memory: bool = True,
        memory_check_interval_s: float = 0.05,
        log_dir: str | os.PathLike[str] | None = None,
        python: str = sys.executable,
        runtime_dir: str | os.PathLike[str] | None = None,
        extra_environment: Mapping[str, str] | None = None,
        logs_endpoint_url: str | None = None,
    ) -> None:
        """``max_concurrency``: the account's concurrent executions (AWS's ConcurrentExecutions); functions
        with reserved concurrency have theirs, the rest share what is left, of which ``unreserved_minimum``
        cannot be reserved (AWS: 100).

        ``retry_delays_s``: waits before async retries 1 and 2 (AWS: about 60 s and 120 s).

        ``init_timeout_s``: longest cold start (AWS allows 10 s; local imports of torch on a busy
        machine can take longer). ``extra_environment``: added to every runtime's environment
        (endpoints of the local stack, say); function environments override it.
        ``runtime_dir``: the packages Lambda's runtime provides (awslambdaric, boto3); when given, a
        function's interpreter sees only its code, its layers and these, as on Lambda.
        ``logs_endpoint_url``: a CloudWatch Logs endpoint (moto) to ship function logs to, as Lambda does.
        """
        if not retry_delays_s or any(d < 0 for d in retry_delays_s):
            raise ConfigError("retry_delays_s must be non-empty and non-negative")
        self._host, self._port = host, port
        self.region, self.account_id = region, account_id
        self._init_timeout_s = init_timeout_s
        self._log_dir_arg = log_dir
        self.log_dir: Path | None = None

        self._stopping = threading.Event()  # set once, by stop(); every part checks it
        self._functions = Functions(Concurrency(max_concurrency, unreserved_minimum))
        self._memory = MemoryWatcher(self._functions, enforce_memory, memory_check_interval_s, self._stopping)
        self._functions.add_all(functions)

        self._lock = threading.Lock()  # start and stop
        self._started = False
        self._frontend: Frontend | None = None
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []

        self._records = InvocationLog(self._stopping)
        self._logs_endpoint_url = logs_endpoint_url
        self._spawner = Spawner(
            self._functions,
            self._records,
            RuntimeApi(self._records, self.function_arn, self._stopping),
            python=python,
            runtime_dir=os.fspath(runtime_dir) if runtime_dir is not None else None,
            region=region,
            extra_environment=extra_environment or {},
            stopping=self._stopping,
        )
        self._executor = Executor(self._functions, self._spawner, self._memory, self._records, init_timeout_s)
        retry_delays = tuple(float(d) for d in retry_delays_s)
        self._delivery = AsyncDelivery(self._functions, self._executor, self.function_arn, retry_delays, self._stopping)
        invoke_api = InvokeApi(self._functions, self._executor, self._delivery, self.function_arn)
        control_api = ControlApi(self._functions, self.function_arn, invoke_api.resolve, account_id)
        self._router = Router(invoke_api.routes() + control_api.routes())

    @classmethod
    def from_functions(cls, functions: Iterable[FunctionConfig], **options: Any) -> LambdaService:
        """A service for these functions; ``options`` are the keyword arguments of the constructor."""
        return cls(functions, **options)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Listen on loopback and return the endpoint URL for boto3's ``endpoint_url``."""
        with self._lock:
            if self._started:
                return self.url
            self.log_dir = Path(self._log_dir_arg or tempfile.mkdtemp(prefix="lambdaml-lambda-"))
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._records.open(self.log_dir, self.invocation_log_path)
            if self._logs_endpoint_url:
                self._records.shipper = LogShipper(self._logs_endpoint_url, self.region)
            self._frontend = self._spawner.frontend = Frontend()
            self._sock = self._frontend.listen(self._host, self._port, self._router.serve)
            self._port = int(self._sock.getsockname()[1])
            self._started = True
        for target, name in ((self._delivery.dispatch, "lambda-async"), (self._memory.run, "lambda-memory")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("local Lambda service on %s (%d functions, logs in %s)", self.url, len(self._functions), self.log_dir)
        return self.url

    def stop(self) -> None:
        """Kill every runtime process and stop listening; queued Event invocations are dropped."""
        with self._lock:
            if not self._started or self._stopping.is_set():
                return
            self._stopping.set()
            pools = self._functions.pools()
        self._delivery.stop()
        self._memory.wake()
        assert self._frontend is not None
        self._frontend.unlisten(self._sock)
        sandboxes = [sb for pool in pools for sb in pool.close()]
        for sandbox in sandboxes:
            sandbox.retire()
        deadline = time.monotonic() + JOIN_S
        for sandbox in sandboxes:
            for thread in sandbox.threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        self._frontend.close()
        for thread in self._threads:
            thread.join(JOIN_S)
        if self._records.shipper is not None:
            self._records.shipper.close()
        self._records.close()
        log.info("local Lambda service on %s stopped", self.url)

    def __enter__(self) -> LambdaService:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def invocation_log_path(self) -> Path:
        if self.log_dir is None:
            raise LambdaServiceError("the service has not been started")
        return self.log_dir / "invocations.jsonl"

    # ----------------------------------------------------------------- functions

    @property
    def functions(self) -> dict[str, FunctionConfig]:
        return self._functions.snapshot()

    def function_arn(self, name: str) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{name}"

    def prewarm(self, name: str, count: int = 1) -> int:
        """Start up to ``count`` sandboxes and wait (bounded) until their handlers are imported; returns how many."""
        pool = self._functions.pool(name)
        started: list[Sandbox] = []
        try:
            for _ in range(count):
                got = pool.acquire(0.0)
                if got is None:
                    break
                sandbox, cold = got
                if cold:
                    try:
                        self._spawner.spawn(sandbox)
                    except (OSError, Stopping):
                        pool.discard(sandbox)
                        raise
                started.append(sandbox)
            deadline = time.monotonic() + self._init_timeout_s
            for sandbox in started:
                with sandbox.cond:
                    while sandbox.ready_mono is None and not sandbox.dead:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        sandbox.cond.wait(remaining)
            return sum(1 for sb in started if sb.ready_mono is not None and not sb.dead)
        finally:
            for sandbox in started:
                pool.release(sandbox)

    # ----------------------------------------------------------------- records

    def invocations(self, function: str | None = None) -> list[InvocationRecord]:
        """Every finished attempt so far (optionally of one function), in completion order."""
        return self._records.invocations(function)

    def write_invocation_log(self, path: str | os.PathLike[str]) -> Path:
        """Write the invocation log as one JSON array (the JSON-lines file grows as it runs)."""
        out = Path(path)
        out.write_text(json.dumps([r.to_dict() for r in self.invocations()], indent=1), encoding="utf-8")
        return out

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no Event invocation is queued, retrying or running; False on timeout."""
        return self._delivery.wait_idle(timeout_s)
