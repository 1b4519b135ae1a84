"""Routing of the Lambda API: a table of (method, path pattern) -> operation.

An operation is one ``Route``: its HTTP method, a regular expression of its path (the named
groups become ``Request.params``) and the function that answers it, so that adding an
operation is one entry and one function. The ``Router`` gives each request its id, turns an
``ApiError`` (or a stopping service) into AWS's error response, and answers a request no
route takes with ``UnknownOperationException``.
"""

from __future__ import annotations

import re
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lambdaml.local.lambda_service.frontend import HttpHandler
from lambdaml.local.lambda_service.models import Stopping
from lambdaml.local.lambda_service.responses import ApiError, Response


@dataclass(frozen=True)
class Request:
    """One API request, as an operation sees it."""

    method: str
    path: str  # without the query string
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # names in lower case
    body: bytes
    request_id: str
    params: Mapping[str, str]  # the named groups of the route's pattern, still percent-encoded

    def query_param(self, name: str) -> str | None:
        """The first value of a query parameter, None when it is absent."""
        values = self.query.get(name)
        return values[0] if values else None


Operation = Callable[[Request], Response]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    operation: Operation

    @classmethod
    def of(cls, method: str, pattern: str, operation: Operation) -> Route:
        return cls(method, re.compile(pattern), operation)


class Router:
    """Dispatches API requests to the first route whose method and path match."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self._routes = tuple(routes)

    def serve(self, conn: socket.socket, addr: Any) -> None:
        HttpHandler(conn, addr, self.dispatch)

    def dispatch(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        request_id = str(uuid.uuid4())
        try:
            return self._call(method, path, headers, body, request_id)
        except ApiError as exc:
            return exc.response(request_id)
        except Stopping:
            return ApiError(503, "ServiceException", "The local Lambda service is stopping").response(request_id)

    def _call(self, method: str, path: str, headers: Mapping[str, str], body: bytes, request_id: str) -> Response:
        url = urllib.parse.urlsplit(path)
        for route in self._routes:
            match = route.pattern.match(url.path)
            if match is not None and route.method == method:
                query = urllib.parse.parse_qs(url.query)
                request = Request(method, url.path, query, headers, body, request_id, match.groupdict())
                return route.operation(request)
        raise ApiError(404, "UnknownOperationException", f"Unknown operation {method} {url.path}")
