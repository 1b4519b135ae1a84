"""The Invoke API (``POST /2015-03-31/functions/{name}/invocations``), as AWS answers it.

``RequestResponse`` runs the function and returns its result (200, with
``X-Amz-Function-Error: Unhandled`` on a function error); ``Event`` queues it for async
delivery (202); ``DryRun`` only checks (204). An unknown function gives 404
``ResourceNotFoundException``, and one at its concurrency limit 429 ``TooManyRequestsException``.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Callable

from lambdaml.local.lambda_service.async_delivery import AsyncDelivery
from lambdaml.local.lambda_service.execution import Executor
from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.models import (
    ASYNC_PAYLOAD_LIMIT,
    LATEST,
    SYNC_PAYLOAD_LIMIT,
    TAIL_BYTES,
    Attempt,
    FunctionConfig,
)
from lambdaml.local.lambda_service.responses import ApiError, Response
from lambdaml.local.lambda_service.routing import Request, Route


class InvokeApi:
    """The Invoke operation: resolving the function, then running it or queueing it."""

    def __init__(
        self,
        functions: Functions,
        executor: Executor,
        delivery: AsyncDelivery,
        function_arn: Callable[[str], str],
    ) -> None:
        self._functions = functions
        self._executor = executor
        self._delivery = delivery
        self._function_arn = function_arn

    def routes(self) -> list[Route]:
        """The operations of this API: one entry each."""
        return [
            Route.of("POST", r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations/?$", self.invoke),
        ]

    def resolve(self, raw_name: str, qualifier: str | None) -> FunctionConfig:
        """Function name, partial ARN or ARN, with an optional ':qualifier'; only $LATEST exists here."""
        parts = raw_name.split(":")
        if raw_name.startswith("arn:"):
            if len(parts) not in (7, 8) or parts[2] != "lambda" or parts[5] != "function":
                raise ApiError(400, "ValidationException", f"Invalid function ARN: {raw_name}")
            name, derived = parts[6], parts[7] if len(parts) == 8 else None
        elif len(parts) in (3, 4) and parts[1] == "function":
            name, derived = parts[2], parts[3] if len(parts) == 4 else None
        elif len(parts) in (1, 2):
            name, derived = parts[0], parts[1] if len(parts) == 2 else None
        else:
            raise ApiError(400, "ValidationException", f"Invalid function name: {raw_name}")
        if derived and qualifier and derived != qualifier:
            raise ApiError(
                400,
                "InvalidParameterValueException",
                "The derived qualifier from the function name does not match the specified qualifier.",
            )
        qualifier = derived or qualifier
        fn = self._functions.get(name)
        if fn is None or qualifier not in (None, LATEST):
            suffix = f":{qualifier}" if qualifier else ""
            raise ApiError(404, "ResourceNotFoundException", f"Function not found: {self._function_arn(name)}{suffix}")
        return fn

    def invoke(self, request: Request) -> Response:
        fn = self.resolve(urllib.parse.unquote(request.params["name"]), request.query_param("Qualifier"))
        headers, body = request.headers, request.body
        kind = headers.get("x-amz-invocation-type", "RequestResponse")
        if kind not in ("RequestResponse", "Event", "DryRun"):
            raise ApiError(400, "InvalidParameterValueException", f"Unsupported invocation type: {kind}")
        base = {"x-amzn-RequestId": request.request_id}
        if kind == "DryRun":
            return Response(204, base)
        limit = ASYNC_PAYLOAD_LIMIT if kind == "Event" else SYNC_PAYLOAD_LIMIT
        if len(body) > limit:
            raise ApiError(
                413,
                "RequestTooLargeException",
                f"Request must be smaller than {limit} bytes for the InvokeFunction operation",
            )
        if not body.strip():
            body = b"{}"
        try:
            json.loads(body)
        except ValueError as exc:
            raise ApiError(
                400, "InvalidRequestContentException", f"Could not parse request body into json: {exc}"
            ) from None
        if kind == "Event":
            self._delivery.enqueue(fn, body, request.request_id)
            return Response(202, base)

        client_context = None
        if "x-amz-client-context" in headers:
            try:
                client_context = base64.b64decode(headers["x-amz-client-context"], validate=True).decode()
                json.loads(client_context)
            except ValueError:
                raise ApiError(
                    400, "InvalidRequestContentException", "Client context must be a valid Base64-encoded JSON object."
                ) from None
        tail = headers.get("x-amz-log-type") == "Tail"
        attempt = Attempt(request.request_id, fn, body, "RequestResponse", 1, client_context, tail)
        if not self._executor.execute(attempt, wait_s=0.0):
            reserved = fn.reserved_concurrency is not None
            raise ApiError(
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
        return Response(200, out, attempt.result)
