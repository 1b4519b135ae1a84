"""HTTP responses of the local Lambda service and the JSON shapes of AWS's errors.

Both HTTP APIs (the Invoke API and each sandbox's Runtime API) answer with a ``Response``.
An ``ApiError`` is an error of the Invoke API itself (the ``X-Amzn-ErrorType`` header and
JSON body boto3 parses); a function's own errors are ``{"errorMessage", "errorType"}``
payloads, built and read by the helpers here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class ApiError(Exception):
    """An AWS-style error response: status, x-amzn-ErrorType and a JSON body."""

    def __init__(self, status: int, code: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

    def response(self, request_id: str) -> Response:
        body: dict[str, str] = {"Type": "User", "message": self.message, "Message": self.message, **self.extra}
        headers = {"Content-Type": "application/json", "X-Amzn-ErrorType": self.code, "x-amzn-RequestId": request_id}
        return Response(self.status, headers, json.dumps(body).encode())


def json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode()


def parse_json(raw: bytes) -> Any:
    """The JSON value of a payload; its text when it is not JSON, None when it is empty."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def function_error(request_id: str, error_type: str, message: str) -> bytes:
    """The payload of an error the service reports for a function (a timeout, a runtime exit)."""
    return json_bytes({"errorMessage": f"RequestId: {request_id} Error: {message}", "errorType": error_type})


def error_type_of(payload: bytes) -> str | None:
    """The ``errorType`` of a function error payload, if it has one."""
    parsed = parse_json(payload)
    return str(parsed.get("errorType")) if isinstance(parsed, dict) and parsed.get("errorType") else None
