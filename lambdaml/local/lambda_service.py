"""A local AWS Lambda service: the Invoke API on loopback, handlers run by AWS's runtime interface client.

boto3 code written for AWS works unchanged against it (``endpoint_url=service.url``): moto
records Lambda functions but cannot run them without Docker, so this service runs them.

How it works:

- **Invoke API** (``POST /2015-03-31/functions/{name}/invocations``): ``RequestResponse``
  (200, ``X-Amz-Function-Error: Unhandled`` on a function error), ``Event`` (202, queued and
  retried), ``DryRun`` (204); unknown functions give 404 ``ResourceNotFoundException`` and a
  function at its concurrency limit gives 429 ``TooManyRequestsException``, as on AWS.
- **Execution environments** ("sandboxes"): one ``python -m awslambdaric module.func``
  process each, serving one invocation at a time and kept warm for the next. Each function
  has a pool that reuses an idle sandbox or starts a new one, up to ``reserved_concurrency``
  (or the service's ``max_concurrency``).
- **Runtime API routing**: every sandbox polls the Runtime API on a loopback port of its
  own, so the port says which process is asking. A path prefix cannot carry that identity:
  awslambdaric's init-error call parses ``AWS_LAMBDA_RUNTIME_API`` as ``host:port``. All
  listening sockets (Invoke API and runtime ports) are served by one selector thread, which
  hands each connection to a short-lived handler thread.
- **Limits**: the timeout is enforced by the waiting caller (the sandbox is killed and the
  caller gets ``Sandbox.Timedout``); memory by sampling the resident set of the sandbox's
  process tree and killing it above ``memory_mb`` (``Runtime.OutOfMemory``). RLIMIT_AS is
  not used: it limits address space, not memory, and torch alone maps more than 512 MB
  while using about 240 MB (its import fails under a 512 MB RLIMIT_AS).
- **Async**: an ``Event`` invocation keeps its request id across retries (AWS does too);
  after ``1 + max_retry_attempts`` failed attempts an AWS-shaped invocation record goes to
  the ``on_failure`` destination (a callable, or another function invoked asynchronously).
- **Invocation log**: one :class:`InvocationRecord` per attempt (cold or warm, duration,
  billed duration, memory, status), from :meth:`LambdaService.invocations` and as JSON lines
  in ``invocations.jsonl``; handler output goes to ``<function>.log`` with START/END/REPORT
  lines in CloudWatch's format.
"""

from __future__ import annotations

import base64
import contextlib
import heapq
import itertools
import json
import logging
import math
import os
import re
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from lambdaml import settings
from lambdaml.errors import ConfigError, LambdaMLError

log = logging.getLogger(__name__)

OnFailure = Callable[[dict[str, Any]], None] | str | None

DEFAULT_ACCOUNT_ID = "123456789012"
LATEST = "$LATEST"
SYNC_PAYLOAD_LIMIT = 6 * 1024 * 1024  # RequestResponse request and response payloads
ASYNC_PAYLOAD_LIMIT = 1024 * 1024  # Event payloads (AWS raised this from 256 KB to 1 MB in 2025)
MAX_TIMEOUT_S = 900.0
TAIL_BYTES = 4096  # X-Amz-Log-Result carries the last 4 KB of the log

_INVOKE_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations/?$")
_RUNTIME_PATH = re.compile(r"^/2018-06-01/runtime/(?:invocation/(?P<id>[^/]+)/(?P<kind>response|error)|(?P<op>.+))$")
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
_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH")
_IDLE_WAIT_S = 60.0  # re-check interval of otherwise unbounded waits (every wake-up is notified)
_THROTTLE_WAIT_S = 5.0  # an Event invocation at the concurrency limit waits in slices of this
_JOIN_S = 5.0


class LambdaServiceError(LambdaMLError):
    """The local Lambda service failed (not a function error: those are returned like AWS does)."""


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Attempt:
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
        self.sandbox: _Sandbox | None = None
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


class _Sandbox:
    """One execution environment: a runtime process, its Runtime API port and its current attempt."""

    def __init__(self, fn: FunctionConfig, sandbox_id: str) -> None:
        self.fn = fn
        self.id = sandbox_id
        self.cond = threading.Condition()
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.port = 0
        self.spawned_mono = 0.0
        self.ready_mono: float | None = None  # first poll of /invocation/next: init is done
        self.current: _Attempt | None = None
        self.dead = False
        self.retired = False  # killed on purpose (timeout, OOM, stop): never reused
        self.oom = False
        self.init_error: bytes | None = None
        self.threads: list[threading.Thread] = []

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def kill(self) -> None:
        """SIGKILL the runtime and everything it started (it leads its own process group)."""
        self.retired = True
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            proc.kill()


class _Stopping(Exception):
    """The service is stopping; the pending work is dropped."""


class _Pool:
    """The sandboxes of one function: reuse an idle one, else start one, up to the concurrency cap."""

    def __init__(self, fn: FunctionConfig, cap: int) -> None:
        self.fn = fn
        self.cap = cap
        self.cond = threading.Condition()
        self.live: list[_Sandbox] = []
        self.idle: list[_Sandbox] = []  # a stack: the most recently used sandbox is reused first
        self.closed = False
        self._ids = itertools.count(1)

    def acquire(self, wait_s: float) -> tuple[_Sandbox, bool] | None:
        """(sandbox, cold) or None when the cap is reached for ``wait_s``; a cold sandbox still needs a process."""
        deadline = time.monotonic() + wait_s
        with self.cond:
            while True:
                if self.closed:
                    raise _Stopping
                while self.idle:
                    sandbox = self.idle.pop()
                    if not sandbox.dead and not sandbox.retired:
                        return sandbox, False
                if len(self.live) < self.cap:
                    sandbox = _Sandbox(self.fn, f"{self.fn.name}-{next(self._ids)}")
                    self.live.append(sandbox)
                    return sandbox, True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.cond.wait(remaining)

    def release(self, sandbox: _Sandbox) -> None:
        with self.cond:
            if sandbox.dead or sandbox.retired or self.closed or sandbox not in self.live:
                self._drop(sandbox)
            else:
                self.idle.append(sandbox)
            self.cond.notify_all()

    def discard(self, sandbox: _Sandbox) -> None:
        with self.cond:
            self._drop(sandbox)
            self.cond.notify_all()

    def _drop(self, sandbox: _Sandbox) -> None:
        with contextlib.suppress(ValueError):
            self.live.remove(sandbox)
        with contextlib.suppress(ValueError):
            self.idle.remove(sandbox)

    def close(self) -> list[_Sandbox]:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            return list(self.live)

    def snapshot(self) -> list[_Sandbox]:
        with self.cond:
            return list(self.live)


@dataclass(order=True)
class _AsyncJob:
    due: float
    seq: int
    request_id: str = field(compare=False)
    fn: FunctionConfig = field(compare=False)
    payload: bytes = field(compare=False)
    attempts: int = field(default=0, compare=False)


@dataclass
class _Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class _ApiError(Exception):
    """An AWS-style error response: status, x-amzn-ErrorType and a JSON body."""

    def __init__(self, status: int, code: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

    def response(self, request_id: str) -> _Response:
        body: dict[str, str] = {"Type": "User", "message": self.message, "Message": self.message, **self.extra}
        headers = {"Content-Type": "application/json", "X-Amzn-ErrorType": self.code, "x-amzn-RequestId": request_id}
        return _Response(self.status, headers, json.dumps(body).encode())


Handler = Callable[[socket.socket, Any], None]


class _Frontend:
    """One selector thread accepting on every listening socket; each connection gets its own thread."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._closed = False
        self._conns: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._loop, name="lambda-service-accept", daemon=True)
        self._thread.start()

    def listen(self, host: str, port: int, handler: Handler) -> socket.socket:
        sock = socket.create_server((host, port), backlog=128)
        sock.setblocking(False)
        with self._lock:
            if self._closed:
                sock.close()
                raise _Stopping
            self._selector.register(sock, selectors.EVENT_READ, handler)
        return sock

    def unlisten(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = [key.fileobj for key in self._selector.get_map().values() if key.data is not None]
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(_JOIN_S)
        for sock in socks:
            self.unlisten(cast(socket.socket, sock))
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # idle keep-alive readers see EOF and end; a response being written still goes out
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _loop(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=_IDLE_WAIT_S):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                    continue
                try:
                    conn, addr = cast(socket.socket, key.fileobj).accept()
                except OSError:  # closed meanwhile, or another accept won the race
                    continue
                with self._lock:
                    self._conns.add(conn)
                threading.Thread(target=self._serve, args=(key.data, conn, addr), daemon=True).start()

    def _serve(self, handler: Handler, conn: socket.socket, addr: Any) -> None:
        try:
            handler(conn, addr)
        except OSError as exc:  # the peer went away (a killed runtime, a client that gave up)
            log.debug("connection from %s ended: %s", addr, exc)
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()


class _HttpHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; the routing function turns (method, path, headers, body) into a response."""

    protocol_version = "HTTP/1.1"
    timeout = 300  # an idle keep-alive connection is dropped after this
    disable_nagle_algorithm = True  # headers and body are two writes: without this, delayed ACKs add 40 ms
    server_version = "lambdaml-local-lambda"

    def __init__(
        self, conn: socket.socket, addr: Any, route: Callable[[str, str, Mapping[str, str], bytes], _Response]
    ) -> None:
        self._route = route
        super().__init__(conn, addr, cast(Any, None))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self) -> None:
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            response = self._route(self.command, self.path, headers, body)
        except Exception as exc:  # a bug here must still answer the caller, not leave it hanging
            log.exception("internal error serving %s %s", self.command, self.path)
            response = _ApiError(500, "ServiceException", f"internal error: {exc}").response(str(uuid.uuid4()))
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if response.body:
            self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def _trace_id() -> str:
    return f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};Parent={secrets.token_hex(8)};Sampled=0"


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (Linux /proc); 0 when it is gone."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def _peak_rss_mb(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return math.ceil(int(line.split()[1]) / 1024)
    except (OSError, ValueError, IndexError):
        return None
    return None


_CAN_MONITOR_MEMORY = sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")


class LambdaService:
    """The Invoke API on loopback, executing handlers with awslambdaric; see the module docstring."""

    def __init__(
        self,
        functions: Iterable[FunctionConfig] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        region: str = "us-east-1",
        account_id: str = DEFAULT_ACCOUNT_ID,
        max_concurrency: int = 64,
        retry_delays_s: Sequence[float] = (1.0, 2.0),
        init_timeout_s: float = 30.0,
        enforce_memory: bool = True,
        memory_check_interval_s: float = 0.05,
        log_dir: str | os.PathLike[str] | None = None,
        python: str = sys.executable,
        extra_environment: Mapping[str, str] | None = None,
    ) -> None:
        """``retry_delays_s``: waits before async retries 1 and 2 (AWS: about 60 s and 120 s).

        ``init_timeout_s``: longest cold start (AWS allows 10 s; local imports of torch on a busy
        machine can take longer). ``extra_environment``: added to every runtime's environment
        (endpoints of the local stack, say); function environments override it.
        """
        if max_concurrency < 1:
            raise ConfigError("max_concurrency must be >= 1")
        if not retry_delays_s or any(d < 0 for d in retry_delays_s):
            raise ConfigError("retry_delays_s must be non-empty and non-negative")
        self._host, self._port = host, port
        self.region, self.account_id = region, account_id
        self._max_concurrency = max_concurrency
        self._retry_delays = tuple(float(d) for d in retry_delays_s)
        self._init_timeout_s = init_timeout_s
        self._enforce_memory = enforce_memory and _CAN_MONITOR_MEMORY
        if enforce_memory and not _CAN_MONITOR_MEMORY:
            log.warning("memory limits are not enforced on this platform (no /proc)")
        self._memory_interval = memory_check_interval_s
        self._python = python
        self._extra_env = dict(extra_environment or {})
        self._log_dir_arg = log_dir
        self.log_dir: Path | None = None

        self._lock = threading.RLock()  # functions, pools, log files
        self._functions: dict[str, FunctionConfig] = {}
        self._pools: dict[str, _Pool] = {}
        self._pending_functions = list(functions)
        for fn in self._pending_functions:
            self._add(fn)
        for fn in self._pending_functions:
            self._check_destination(fn)

        self._frontend: _Frontend | None = None
        self._sock: socket.socket | None = None
        self._started = self._stopping = False
        self._stop_event = threading.Event()
        self._threads: list[threading.Thread] = []
        self._records: list[InvocationRecord] = []
        self._records_lock = threading.Lock()
        self._fn_logs: dict[str, Any] = {}
        self._jsonl: Any = None

        self._async_cond = threading.Condition()
        self._async_heap: list[_AsyncJob] = []
        self._async_seq = itertools.count()
        self._outstanding = 0  # Event invocations queued, waiting to retry or running
        self._monitor_cond = threading.Condition()

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
            self._jsonl = self.invocation_log_path.open("a", encoding="utf-8")
            self._frontend = _Frontend()
            self._sock = self._frontend.listen(self._host, self._port, self._serve_invoke)
            self._port = int(self._sock.getsockname()[1])
            self._started = True
        for target, name in ((self._dispatch_async, "lambda-async"), (self._watch_memory, "lambda-memory")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("local Lambda service on %s (%d functions, logs in %s)", self.url, len(self._functions), self.log_dir)
        return self.url

    def stop(self) -> None:
        """Kill every runtime process and stop listening; queued Event invocations are dropped."""
        with self._lock:
            if not self._started or self._stopping:
                return
            self._stopping = True
            pools = list(self._pools.values())
        self._stop_event.set()
        with self._async_cond:
            dropped = len(self._async_heap)
            self._async_heap.clear()
            self._async_cond.notify_all()
        if dropped:
            log.warning("dropping %d queued Event invocations at stop", dropped)
        with self._monitor_cond:
            self._monitor_cond.notify_all()
        assert self._frontend is not None
        self._frontend.unlisten(self._sock)
        sandboxes = [sb for pool in pools for sb in pool.close()]
        for sandbox in sandboxes:
            with sandbox.cond:
                sandbox.retired = True
                sandbox.cond.notify_all()
            sandbox.kill()
        deadline = time.monotonic() + _JOIN_S
        for sandbox in sandboxes:
            for thread in sandbox.threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        self._frontend.close()
        for thread in self._threads:
            thread.join(_JOIN_S)
        with self._lock:
            for f in self._fn_logs.values():
                f.close()
            self._fn_logs.clear()
        with self._records_lock:
            if self._jsonl is not None:
                self._jsonl.close()
                self._jsonl = None
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
        with self._lock:
            return dict(self._functions)

    def add_function(self, fn: FunctionConfig) -> None:
        """Register (or replace, dropping warm sandboxes of) a function; allowed while running."""
        with self._lock:
            old = self._pools.get(fn.name)
            self._add(fn)
            self._check_destination(fn)
        if old is not None:
            for sandbox in old.close():
                sandbox.kill()

    def _add(self, fn: FunctionConfig) -> None:
        cap = fn.reserved_concurrency if fn.reserved_concurrency is not None else self._max_concurrency
        self._functions[fn.name] = fn
        self._pools[fn.name] = _Pool(fn, cap)

    def _check_destination(self, fn: FunctionConfig) -> None:
        if isinstance(fn.on_failure, str) and fn.on_failure not in self._functions:
            raise ConfigError(f"function {fn.name!r}: on_failure names unknown function {fn.on_failure!r}")

    def function_arn(self, name: str) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{name}"

    def prewarm(self, name: str, count: int = 1) -> int:
        """Start up to ``count`` sandboxes and wait (bounded) until their handlers are imported; returns how many."""
        pool = self._pool(name)
        started: list[_Sandbox] = []
        try:
            for _ in range(count):
                got = pool.acquire(0.0)
                if got is None:
                    break
                sandbox, cold = got
                if cold:
                    try:
                        self._spawn(sandbox)
                    except (OSError, _Stopping):
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

    # ----------------------------------------------------------------- invocation log

    def invocations(self, function: str | None = None) -> list[InvocationRecord]:
        """Every finished attempt so far (optionally of one function), in completion order."""
        with self._records_lock:
            return [r for r in self._records if function is None or r.function == function]

    def write_invocation_log(self, path: str | os.PathLike[str]) -> Path:
        """Write the invocation log as one JSON array (the JSON-lines file grows as it runs)."""
        out = Path(path)
        out.write_text(json.dumps([r.to_dict() for r in self.invocations()], indent=1), encoding="utf-8")
        return out

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no Event invocation is queued, retrying or running; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._async_cond:
            while self._outstanding > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._async_cond.wait(remaining)
        return True

    def _record(self, attempt: _Attempt, sandbox: _Sandbox | None) -> InvocationRecord:
        now_wall, now_mono = time.time(), time.monotonic()
        end_mono = attempt.end_mono or now_mono
        duration_ms = (end_mono - attempt.start_mono) * 1000.0 if attempt.delivered else 0.0
        init_ms: float | None = None
        if attempt.cold and sandbox is not None and sandbox.spawned_mono:
            ready = sandbox.ready_mono if sandbox.ready_mono is not None else end_mono
            init_ms = round(max(0.0, ready - sandbox.spawned_mono) * 1000.0, 2)
        start = attempt.start_wall if attempt.delivered else attempt.assigned_wall
        record = InvocationRecord(
            request_id=attempt.request_id,
            function=attempt.fn.name,
            invocation_type=attempt.invocation_type,
            attempt=attempt.attempt,
            pid=sandbox.pid if sandbox is not None else None,
            cold=attempt.cold,
            start=start,
            end=now_wall - (now_mono - end_mono),
            duration_ms=round(duration_ms, 2),
            init_duration_ms=init_ms,
            billed_duration_ms=math.ceil(duration_ms + (init_ms or 0.0)),
            memory_mb=attempt.fn.memory_mb,
            max_memory_used_mb=_peak_rss_mb(sandbox.pid if sandbox is not None else None),
            status=attempt.status,
            error_type=attempt.error_type,
        )
        with self._records_lock:
            self._records.append(record)
            if self._jsonl is not None:
                self._jsonl.write(json.dumps(record.to_dict()) + "\n")
                self._jsonl.flush()
        report = (
            f"REPORT RequestId: {record.request_id}\tDuration: {record.duration_ms:.2f} ms\t"
            f"Billed Duration: {record.billed_duration_ms} ms\tMemory Size: {record.memory_mb} MB\t"
            f"Max Memory Used: {record.max_memory_used_mb or 0} MB"
        )
        if init_ms is not None:
            report += f"\tInit Duration: {init_ms:.2f} ms"
        if record.status != "success":
            report += f"\tStatus: {record.status}"
        lines = f"END RequestId: {record.request_id}\n{report}\n".encode()
        if attempt.tail is not None:
            attempt.tail.append(lines)
        self._write_log(attempt.fn.name, lines)
        return record

    def _write_log(self, function: str, data: bytes) -> None:
        with self._lock:
            f = self._fn_logs.get(function)
            if f is None and self.log_dir is not None and not self._stopping:
                f = self._fn_logs[function] = (self.log_dir / f"{function}.log").open("ab")
            if f is not None:
                f.write(data)
                f.flush()

    # ----------------------------------------------------------------- Invoke API

    def _serve_invoke(self, conn: socket.socket, addr: Any) -> None:
        _HttpHandler(conn, addr, self._route_invoke)

    def _route_invoke(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> _Response:
        request_id = str(uuid.uuid4())
        try:
            return self._invoke(method, path, headers, body, request_id)
        except _ApiError as exc:
            return exc.response(request_id)
        except _Stopping:
            return _ApiError(503, "ServiceException", "The local Lambda service is stopping").response(request_id)

    def _resolve(self, raw_name: str, qualifier: str | None) -> FunctionConfig:
        """Function name, partial ARN or ARN, with an optional ':qualifier'; only $LATEST exists here."""
        parts = raw_name.split(":")
        if raw_name.startswith("arn:"):
            if len(parts) not in (7, 8) or parts[2] != "lambda" or parts[5] != "function":
                raise _ApiError(400, "ValidationException", f"Invalid function ARN: {raw_name}")
            name, derived = parts[6], parts[7] if len(parts) == 8 else None
        elif len(parts) in (3, 4) and parts[1] == "function":
            name, derived = parts[2], parts[3] if len(parts) == 4 else None
        elif len(parts) in (1, 2):
            name, derived = parts[0], parts[1] if len(parts) == 2 else None
        else:
            raise _ApiError(400, "ValidationException", f"Invalid function name: {raw_name}")
        if derived and qualifier and derived != qualifier:
            raise _ApiError(
                400,
                "InvalidParameterValueException",
                "The derived qualifier from the function name does not match the specified qualifier.",
            )
        qualifier = derived or qualifier
        with self._lock:
            fn = self._functions.get(name)
        if fn is None or qualifier not in (None, LATEST):
            suffix = f":{qualifier}" if qualifier else ""
            raise _ApiError(404, "ResourceNotFoundException", f"Function not found: {self.function_arn(name)}{suffix}")
        return fn

    def _pool(self, name: str) -> _Pool:
        with self._lock:
            pool = self._pools.get(name)
        if pool is None:
            raise LambdaServiceError(f"no function named {name!r}")
        return pool

    def _invoke(self, method: str, path: str, headers: Mapping[str, str], body: bytes, request_id: str) -> _Response:
        url = urllib.parse.urlsplit(path)
        match = _INVOKE_PATH.match(url.path)
        if method != "POST" or match is None:
            raise _ApiError(404, "UnknownOperationException", f"Unknown operation {method} {url.path}")
        qualifier = urllib.parse.parse_qs(url.query).get("Qualifier", [None])[0]
        fn = self._resolve(urllib.parse.unquote(match["name"]), qualifier)
        kind = headers.get("x-amz-invocation-type", "RequestResponse")
        if kind not in ("RequestResponse", "Event", "DryRun"):
            raise _ApiError(400, "InvalidParameterValueException", f"Unsupported invocation type: {kind}")
        base = {"x-amzn-RequestId": request_id}
        if kind == "DryRun":
            return _Response(204, base)
        limit = ASYNC_PAYLOAD_LIMIT if kind == "Event" else SYNC_PAYLOAD_LIMIT
        if len(body) > limit:
            raise _ApiError(
                413,
                "RequestTooLargeException",
                f"Request must be smaller than {limit} bytes for the InvokeFunction operation",
            )
        if not body.strip():
            body = b"{}"
        try:
            json.loads(body)
        except ValueError as exc:
            raise _ApiError(
                400, "InvalidRequestContentException", f"Could not parse request body into json: {exc}"
            ) from None
        if kind == "Event":
            self._enqueue(fn, body, request_id)
            return _Response(202, base)

        client_context = None
        if "x-amz-client-context" in headers:
            try:
                client_context = base64.b64decode(headers["x-amz-client-context"], validate=True).decode()
                json.loads(client_context)
            except ValueError:
                raise _ApiError(
                    400, "InvalidRequestContentException", "Client context must be a valid Base64-encoded JSON object."
                ) from None
        tail = headers.get("x-amz-log-type") == "Tail"
        attempt = _Attempt(request_id, fn, body, "RequestResponse", 1, client_context, tail)
        if not self._execute(attempt, wait_s=0.0):
            reserved = fn.reserved_concurrency is not None
            raise _ApiError(
                429,
                "TooManyRequestsException",
                "Rate Exceeded.",
                Reason="ReservedFunctionConcurrentInvocationLimitExceeded"
                if reserved
                else "ConcurrentInvocationLimitExceeded",
            )
        out = {**base, "Content-Type": "application/json", "X-Amz-Executed-Version": LATEST}
        if attempt.failed:
            out["X-Amz-Function-Error"] = "Unhandled"
        if attempt.tail is not None:
            out["X-Amz-Log-Result"] = base64.b64encode(b"".join(attempt.tail)[-TAIL_BYTES:]).decode()
        return _Response(200, out, attempt.result)

    # ----------------------------------------------------------------- execution

    def _execute(self, attempt: _Attempt, wait_s: float) -> bool:
        """Run one attempt to its outcome on a sandbox; False when no capacity freed up within ``wait_s``."""
        pool = self._pool(attempt.fn.name)
        while True:
            got = pool.acquire(wait_s)
            if got is None:
                return False
            sandbox, cold = got
            if cold:
                try:
                    self._spawn(sandbox)
                except (OSError, _Stopping) as exc:
                    pool.discard(sandbox)
                    if isinstance(exc, _Stopping):
                        raise
                    log.error("cannot start a runtime for %s: %s", attempt.fn.name, exc)
                    attempt.cold, attempt.assigned_wall = True, time.time()
                    error = self._error(attempt, "Runtime.StartError", f"cannot start: {exc}")
                    attempt.finish("crash", error, "Runtime.StartError")
                    self._record(attempt, None)
                    return True
            if self._run_on(sandbox, attempt, cold):
                break
            pool.discard(sandbox)  # a warm sandbox that died while idle: try another
        if attempt.status in ("success", "error") and not sandbox.dead:
            pool.release(sandbox)
        else:
            sandbox.kill()
            pool.discard(sandbox)
        self._record(attempt, sandbox)
        return True

    def _run_on(self, sandbox: _Sandbox, attempt: _Attempt, cold: bool) -> bool:
        """Hand the attempt to the sandbox and wait, bounded, for its outcome; False if the sandbox was gone."""
        kill = False
        with sandbox.cond:
            if sandbox.dead and not cold and sandbox.init_error is None:
                return False
            attempt.sandbox, attempt.cold = sandbox, cold
            attempt.assigned_mono, attempt.assigned_wall = time.monotonic(), time.time()
            if sandbox.init_error is not None:
                attempt.finish("init_error", sandbox.init_error, self._error_type(sandbox.init_error))
            elif sandbox.dead:
                payload = self._exit_error(attempt, sandbox)
                attempt.finish("oom" if sandbox.oom else "crash", payload, self._error_type(payload))
            sandbox.current = attempt
            sandbox.cond.notify_all()
            with self._monitor_cond:
                self._monitor_cond.notify_all()
            while not attempt.finished:
                limit = attempt.deadline_mono if attempt.delivered else attempt.assigned_mono + self._init_timeout_s
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    if attempt.delivered:
                        message = f"Task timed out after {attempt.fn.timeout_s:.2f} seconds"
                    else:
                        message = f"Init timed out after {self._init_timeout_s:.2f} seconds"
                    attempt.finish("timeout", self._error(attempt, "Sandbox.Timedout", message), "Sandbox.Timedout")
                    kill = True
                    break
                sandbox.cond.wait(remaining)
            sandbox.current = None
            sandbox.cond.notify_all()
        if kill:
            log.info("%s %s timed out; killing runtime pid %s", attempt.fn.name, attempt.request_id, sandbox.pid)
            sandbox.kill()
        return True

    @staticmethod
    def _error(attempt: _Attempt, error_type: str, message: str) -> bytes:
        return _json({"errorMessage": f"RequestId: {attempt.request_id} Error: {message}", "errorType": error_type})

    @staticmethod
    def _error_type(payload: bytes) -> str | None:
        parsed = _parse_json(payload)
        return str(parsed.get("errorType")) if isinstance(parsed, dict) and parsed.get("errorType") else None

    def _exit_error(self, attempt: _Attempt, sandbox: _Sandbox) -> bytes:
        code = sandbox.process.returncode if sandbox.process is not None else None
        if code is not None and code < 0:
            try:
                reason = f"signal: {signal.Signals(-code).name[3:].lower()}"
            except ValueError:
                reason = f"signal: {-code}"
            reason = reason.replace("signal: kill", "signal: killed")
        else:
            reason = f"exit status {code}"
        error_type = "Runtime.OutOfMemory" if sandbox.oom else "Runtime.ExitError"
        return self._error(attempt, error_type, f"Runtime exited with error: {reason}")

    def _spawn(self, sandbox: _Sandbox) -> None:
        """Start the runtime process of a new sandbox, with a Runtime API port of its own."""
        if self._frontend is None or self._stopping:
            raise _Stopping
        fn = sandbox.fn
        sandbox.sock = self._frontend.listen("127.0.0.1", 0, lambda c, a: self._serve_runtime(sandbox, c, a))
        sandbox.port = int(sandbox.sock.getsockname()[1])
        sandbox.spawned_mono = time.monotonic()
        try:
            sandbox.process = subprocess.Popen(
                [self._python, "-m", "awslambdaric", fn.handler],
                cwd=os.fspath(fn.code_dir),
                env=self._environment(sandbox),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill takes its children too
            )
        except OSError:
            self._frontend.unlisten(sandbox.sock)
            raise
        log.debug("started runtime %s pid %d on port %d", sandbox.id, sandbox.process.pid, sandbox.port)
        for target, name in ((self._reap, "reap"), (self._pump_output, "out")):
            thread = threading.Thread(target=target, args=(sandbox,), name=f"{sandbox.id}-{name}", daemon=True)
            thread.start()
            sandbox.threads.append(thread)
        if self._stopping:
            sandbox.kill()

    def _environment(self, sandbox: _Sandbox) -> dict[str, str]:
        fn = sandbox.fn
        code_dir = os.path.abspath(os.fspath(fn.code_dir))
        env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
        today = datetime.now(UTC).strftime("%Y/%m/%d")
        env.update(
            {
                "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{sandbox.port}",
                "_HANDLER": fn.handler,
                "AWS_LAMBDA_FUNCTION_NAME": fn.name,
                "AWS_LAMBDA_FUNCTION_VERSION": LATEST,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_mb),
                "AWS_LAMBDA_FUNCTION_TIMEOUT": f"{fn.timeout_s:g}",
                "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
                "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{fn.name}",
                "AWS_LAMBDA_LOG_STREAM_NAME": f"{today}/[{LATEST}]{uuid.uuid4().hex}",
                "AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}",
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_ACCESS_KEY_ID": settings.LOCAL_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": settings.LOCAL_SECRET_KEY,
                "LAMBDA_TASK_ROOT": code_dir,
                "PYTHONPATH": code_dir,
                "PYTHONUNBUFFERED": "1",
                "TZ": ":UTC",
            }
        )
        env.update(self._extra_env)
        env.update(fn.environment)
        return env

    def _reap(self, sandbox: _Sandbox) -> None:
        """Wait for the runtime to exit; an attempt it was running fails as AWS reports a runtime exit."""
        assert sandbox.process is not None
        code = sandbox.process.wait()  # bounded by stop(), which kills every runtime
        with sandbox.cond:
            sandbox.dead = True
            attempt = sandbox.current
            if attempt is not None and not attempt.finished:
                payload = self._exit_error(attempt, sandbox)
                attempt.finish("oom" if sandbox.oom else "crash", payload, self._error_type(payload))
            sandbox.cond.notify_all()
        if not sandbox.retired:
            log.info("runtime %s (pid %d) exited with %s", sandbox.id, sandbox.process.pid, code)
        assert self._frontend is not None
        self._frontend.unlisten(sandbox.sock)
        with self._lock:
            pool = self._pools.get(sandbox.fn.name)
        if pool is not None:
            pool.discard(sandbox)

    def _pump_output(self, sandbox: _Sandbox) -> None:
        """Copy the runtime's output to the function's log (and to the Tail of the current attempt)."""
        assert sandbox.process is not None and sandbox.process.stdout is not None
        with sandbox.process.stdout as out:
            for line in iter(out.readline, b""):
                self._write_log(sandbox.fn.name, line)
                attempt = sandbox.current
                if attempt is not None and attempt.tail is not None:
                    attempt.tail.append(line)

    # ----------------------------------------------------------------- Runtime API

    def _serve_runtime(self, sandbox: _Sandbox, conn: socket.socket, addr: Any) -> None:
        _HttpHandler(conn, addr, lambda m, p, h, b: self._route_runtime(sandbox, m, p, h, b))

    def _route_runtime(
        self, sandbox: _Sandbox, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> _Response:
        match = _RUNTIME_PATH.match(urllib.parse.urlsplit(path).path)
        ok = _Response(202, {"Content-Type": "application/json"}, _json({"status": "OK"}))
        if match is None:
            return _Response(404, {"Content-Type": "application/json"}, _json({"errorType": "NotFound"}))
        if method == "GET" and match["op"] == "invocation/next":
            return self._next(sandbox)
        if method == "POST" and match["op"] == "init/error":
            with sandbox.cond:
                sandbox.init_error = body or _json({"errorType": headers.get("lambda-runtime-function-error-type")})
                attempt = sandbox.current
                if attempt is not None:
                    attempt.finish("init_error", sandbox.init_error, self._error_type(sandbox.init_error))
                sandbox.cond.notify_all()
            log.warning("%s failed to initialize: %s", sandbox.fn.name, body[:500].decode("utf-8", "replace"))
            return ok
        if method == "POST" and match["kind"]:
            with sandbox.cond:
                attempt = sandbox.current
                if attempt is None or attempt.request_id != match["id"] or not attempt.delivered:
                    return _Response(
                        400,
                        {"Content-Type": "application/json"},
                        _json({"errorMessage": "Invalid request ID", "errorType": "InvalidRequestID"}),
                    )
                if match["kind"] == "error":
                    error_type = self._error_type(body) or headers.get("lambda-runtime-function-error-type")
                    if not isinstance(_parse_json(body), dict):  # AWS always returns a JSON error object
                        body = self._error(attempt, error_type or "Runtime.Unknown", body.decode("utf-8", "replace"))
                    attempt.finish("error", body, error_type)
                elif len(body) > SYNC_PAYLOAD_LIMIT:
                    message = (
                        f"Response payload size exceeded maximum allowed payload size ({SYNC_PAYLOAD_LIMIT} bytes)"
                    )
                    payload = _json({"errorMessage": message, "errorType": "Function.ResponseSizeTooLarge"})
                    attempt.finish("error", payload, "Function.ResponseSizeTooLarge")
                else:
                    attempt.finish("success", body)
                sandbox.cond.notify_all()
            return ok
        return _Response(404, {"Content-Type": "application/json"}, _json({"errorType": "NotFound"}))

    def _next(self, sandbox: _Sandbox) -> _Response:
        """Long-poll: block until this sandbox is handed an attempt (notified, never polled)."""
        with sandbox.cond:
            if sandbox.ready_mono is None:
                sandbox.ready_mono = time.monotonic()
                sandbox.cond.notify_all()
            while True:
                attempt = sandbox.current
                if sandbox.retired or self._stopping:
                    return _Response(500, {"Content-Type": "application/json"}, _json({"errorType": "ShuttingDown"}))
                if attempt is not None and not attempt.delivered and not attempt.finished:
                    break
                sandbox.cond.wait(_IDLE_WAIT_S)
            now_wall = time.time()
            attempt.delivered = True
            attempt.start_mono, attempt.start_wall = time.monotonic(), now_wall
            attempt.deadline_mono = attempt.start_mono + attempt.fn.timeout_s
            deadline_ms = int((now_wall + attempt.fn.timeout_s) * 1000)
            sandbox.cond.notify_all()
        start_line = f"START RequestId: {attempt.request_id} Version: {LATEST}\n".encode()
        if attempt.tail is not None:
            attempt.tail.append(start_line)
        self._write_log(attempt.fn.name, start_line)
        headers = {
            "Content-Type": "application/json",
            "Lambda-Runtime-Aws-Request-Id": attempt.request_id,
            "Lambda-Runtime-Deadline-Ms": str(deadline_ms),
            "Lambda-Runtime-Invoked-Function-Arn": self.function_arn(attempt.fn.name),
            "Lambda-Runtime-Trace-Id": _trace_id(),
        }
        if attempt.client_context:
            headers["Lambda-Runtime-Client-Context"] = attempt.client_context
        return _Response(200, headers, attempt.payload)

    # ----------------------------------------------------------------- memory

    def _watch_memory(self) -> None:
        """Kill a sandbox whose process tree's RSS exceeds its memory size (sampled while it works)."""
        if not self._enforce_memory:
            return
        while not self._stopping:
            with self._lock:
                pools = list(self._pools.values())
            active = [
                sb
                for pool in pools
                for sb in pool.snapshot()
                if sb.process is not None and not sb.dead and (sb.ready_mono is None or sb.current is not None)
            ]
            if not active:
                with self._monitor_cond:
                    self._monitor_cond.wait(_IDLE_WAIT_S)
                continue
            for sandbox in active:
                pid = sandbox.pid
                limit = sandbox.fn.memory_mb * 1024 * 1024
                if pid is not None and (rss := _tree_rss(pid)) > limit:
                    log.warning(
                        "%s pid %d uses %.0f MB > %d MB: killing it", sandbox.id, pid, rss / 2**20, sandbox.fn.memory_mb
                    )
                    with sandbox.cond:
                        sandbox.oom = True
                    sandbox.kill()
            self._stop_event.wait(self._memory_interval)

    # ----------------------------------------------------------------- async

    def _enqueue(self, fn: FunctionConfig, payload: bytes, request_id: str) -> None:
        with self._async_cond:
            if self._stopping:
                raise _Stopping
            self._outstanding += 1
            heapq.heappush(
                self._async_heap, _AsyncJob(time.monotonic(), next(self._async_seq), request_id, fn, payload)
            )
            self._async_cond.notify_all()

    def _dispatch_async(self) -> None:
        """Start every due Event job (first tries and retries) on a thread of its own."""
        while True:
            with self._async_cond:
                while not self._stopping:
                    now = time.monotonic()
                    if self._async_heap and self._async_heap[0].due <= now:
                        job = heapq.heappop(self._async_heap)
                        break
                    wait = self._async_heap[0].due - now if self._async_heap else _IDLE_WAIT_S
                    self._async_cond.wait(wait)
                else:
                    return
            threading.Thread(
                target=self._run_async, args=(job,), name=f"event-{job.request_id[:8]}", daemon=True
            ).start()

    def _run_async(self, job: _AsyncJob) -> None:
        done = True
        try:
            job.attempts += 1
            attempt = _Attempt(job.request_id, job.fn, job.payload, "Event", job.attempts)
            while not self._execute(attempt, wait_s=_THROTTLE_WAIT_S):
                if self._stopping:
                    return
            if not attempt.failed:
                return
            if job.attempts <= job.fn.max_retry_attempts:
                delay = self._retry_delays[min(job.attempts - 1, len(self._retry_delays) - 1)]
                log.info("%s %s failed (%s); retry in %gs", job.fn.name, job.request_id, attempt.status, delay)
                with self._async_cond:
                    if not self._stopping:
                        job.due, job.seq = time.monotonic() + delay, next(self._async_seq)
                        heapq.heappush(self._async_heap, job)
                        self._async_cond.notify_all()
                        done = False
                return
            self._deliver_failure(job, attempt)
        except _Stopping:
            return
        except LambdaMLError:
            log.exception("Event invocation %s of %s failed in the service", job.request_id, job.fn.name)
        finally:
            if done:
                with self._async_cond:
                    self._outstanding -= 1
                    self._async_cond.notify_all()

    def _deliver_failure(self, job: _AsyncJob, attempt: _Attempt) -> None:
        """Send AWS's invocation record to the on-failure destination (or log the dropped event)."""
        record = {
            "version": "1.0",
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "requestContext": {
                "requestId": job.request_id,
                "functionArn": f"{self.function_arn(job.fn.name)}:{LATEST}",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": job.attempts,
            },
            "requestPayload": _parse_json(job.payload),
            "responseContext": {"statusCode": 200, "executedVersion": LATEST, "functionError": "Unhandled"},
            "responsePayload": _parse_json(attempt.result),
        }
        destination = job.fn.on_failure
        if destination is None:
            log.warning("%s %s failed %d times; no on-failure destination", job.fn.name, job.request_id, job.attempts)
        elif isinstance(destination, str):
            with self._lock:
                target = self._functions[destination]
            self._enqueue(target, _json(record), str(uuid.uuid4()))
        else:
            try:
                destination(record)
            except Exception:  # a user callback: its failure must not take the dispatcher down
                log.exception("on-failure callback of %s raised", job.fn.name)
