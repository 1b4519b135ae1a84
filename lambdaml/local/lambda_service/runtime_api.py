"""The Runtime API that awslambdaric polls: next invocation, its response or error, init errors.

Every sandbox has a loopback port of its own, so the port says which process is asking: a
path prefix cannot carry that identity, as awslambdaric's init-error call parses
``AWS_LAMBDA_RUNTIME_API`` as ``host:port``. The routes settle the sandbox's current
attempt, which the waiting caller (execution.py) then sees.
"""

from __future__ import annotations

import logging
import re
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from lambdaml.local.lambda_service.frontend import HttpHandler
from lambdaml.local.lambda_service.models import IDLE_WAIT_S, LATEST, SYNC_PAYLOAD_LIMIT
from lambdaml.local.lambda_service.records import InvocationLog
from lambdaml.local.lambda_service.responses import Response, error_type_of, function_error, json_bytes, parse_json
from lambdaml.local.lambda_service.sandboxes import Sandbox

log = logging.getLogger(__name__)

_RUNTIME_PATH = re.compile(r"^/2018-06-01/runtime/(?:invocation/(?P<id>[^/]+)/(?P<kind>response|error)|(?P<op>.+))$")


def _trace_id() -> str:
    return f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};Parent={secrets.token_hex(8)};Sampled=0"


class RuntimeApi:
    """Serves the Runtime API port of each sandbox; ``function_arn`` names the invoked function."""

    def __init__(self, records: InvocationLog, function_arn: Callable[[str], str], stopping: threading.Event) -> None:
        self._records = records
        self._function_arn = function_arn
        self._stopping = stopping

    def serve(self, sandbox: Sandbox, conn: socket.socket, addr: Any) -> None:
        HttpHandler(conn, addr, lambda m, p, h, b: self.route(sandbox, m, p, h, b))

    def route(self, sandbox: Sandbox, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        match = _RUNTIME_PATH.match(urllib.parse.urlsplit(path).path)
        ok = Response(202, {"Content-Type": "application/json"}, json_bytes({"status": "OK"}))
        if match is None:
            return Response(404, {"Content-Type": "application/json"}, json_bytes({"errorType": "NotFound"}))
        if method == "GET" and match["op"] == "invocation/next":
            return self._next(sandbox)
        if method == "POST" and match["op"] == "init/error":
            with sandbox.cond:
                error_type = headers.get("lambda-runtime-function-error-type")
                sandbox.init_error = body or json_bytes({"errorType": error_type})
                attempt = sandbox.current
                if attempt is not None:
                    attempt.finish("init_error", sandbox.init_error, error_type_of(sandbox.init_error))
                sandbox.cond.notify_all()
            log.warning("%s failed to initialize: %s", sandbox.fn.name, body[:500].decode("utf-8", "replace"))
            return ok
        if method == "POST" and match["kind"]:
            with sandbox.cond:
                attempt = sandbox.current
                if attempt is None or attempt.request_id != match["id"] or not attempt.delivered:
                    return Response(
                        400,
                        {"Content-Type": "application/json"},
                        json_bytes({"errorMessage": "Invalid request ID", "errorType": "InvalidRequestID"}),
                    )
                if match["kind"] == "error":
                    error_type = error_type_of(body) or headers.get("lambda-runtime-function-error-type")
                    if not isinstance(parse_json(body), dict):  # AWS always returns a JSON error object
                        body = function_error(
                            attempt.request_id, error_type or "Runtime.Unknown", body.decode("utf-8", "replace")
                        )
                    attempt.finish("error", body, error_type)
                elif len(body) > SYNC_PAYLOAD_LIMIT:
                    message = (
                        f"Response payload size exceeded maximum allowed payload size ({SYNC_PAYLOAD_LIMIT} bytes)"
                    )
                    payload = json_bytes({"errorMessage": message, "errorType": "Function.ResponseSizeTooLarge"})
                    attempt.finish("error", payload, "Function.ResponseSizeTooLarge")
                else:
                    attempt.finish("success", body)
                sandbox.cond.notify_all()
            return ok
        return Response(404, {"Content-Type": "application/json"}, json_bytes({"errorType": "NotFound"}))

    def _next(self, sandbox: Sandbox) -> Response:
        """Long-poll: block until this sandbox is handed an attempt (notified, never polled)."""
        with sandbox.cond:
            if sandbox.ready_mono is None:
                sandbox.ready_mono = time.monotonic()
                sandbox.cond.notify_all()
            while True:
                attempt = sandbox.current
                if sandbox.retired or self._stopping.is_set():
                    return Response(
                        500, {"Content-Type": "application/json"}, json_bytes({"errorType": "ShuttingDown"})
                    )
                if attempt is not None and not attempt.delivered and not attempt.finished:
                    break
                sandbox.cond.wait(IDLE_WAIT_S)
            now_wall = time.time()
            attempt.delivered = True
            attempt.start_mono, attempt.start_wall = time.monotonic(), now_wall
            attempt.deadline_mono = attempt.start_mono + attempt.fn.timeout_s
            deadline_ms = int((now_wall + attempt.fn.timeout_s) * 1000)
            sandbox.cond.notify_all()
        start_line = f"START RequestId: {attempt.request_id} Version: {LATEST}\n".encode()
        if attempt.tail is not None:
            attempt.tail.append(start_line)
        self._records.write(sandbox, start_line)
        headers = {
            "Content-Type": "application/json",
            "Lambda-Runtime-Aws-Request-Id": attempt.request_id,
            "Lambda-Runtime-Deadline-Ms": str(deadline_ms),
            "Lambda-Runtime-Invoked-Function-Arn": self._function_arn(attempt.fn.name),
            "Lambda-Runtime-Trace-Id": _trace_id(),
        }
        if attempt.client_context:
            headers["Lambda-Runtime-Client-Context"] = attempt.client_context
        return Response(200, headers, attempt.payload)
