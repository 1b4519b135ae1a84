"""The Lambda control-plane operations that tools call: functions, their concurrency, the account.

ListFunctions, GetFunction, GetFunctionConfiguration, the three concurrency operations and
GetAccountSettings, at AWS's paths and with its JSON shapes, so that the AWS CLI, SAM and
LambdaML's own preflight read the local service as they read AWS. A function's code size
and SHA-256 are those of its code directory (what a zip of it would hold).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NotRequired, TypedDict

from lambdaml.local.lambda_service.concurrency import ConcurrencyLimitError
from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.models import LATEST, FunctionConfig
from lambdaml.local.lambda_service.responses import ApiError, Response, json_bytes
from lambdaml.local.lambda_service.routing import Request, Route

# AWS's account limits on code (bytes): the whole account, one unzipped function, one zip upload.
TOTAL_CODE_SIZE = 80 * 1024**3
CODE_SIZE_UNZIPPED = 250 * 1024**2
CODE_SIZE_ZIPPED = 50 * 1024**2
MAX_LIST_ITEMS = 50  # ListFunctions' page size when MaxItems is not given (AWS: 50)
_NAME = r"(?P<name>[^/]+)"


class FunctionConfiguration(TypedDict):
    """A function as GetFunctionConfiguration answers (AWS's shape; the local service's values)."""

    FunctionName: str
    FunctionArn: str
    Runtime: str
    Role: str
    Handler: str
    CodeSize: int
    Description: str
    Timeout: int
    MemorySize: int
    LastModified: str
    CodeSha256: str
    Version: str
    Environment: dict[str, dict[str, str]]  # {"Variables": {...}}
    TracingConfig: dict[str, str]
    RevisionId: str
    State: str
    LastUpdateStatus: str
    PackageType: str
    Architectures: list[str]
    EphemeralStorage: dict[str, int]
    LoggingConfig: dict[str, str]


class FunctionList(TypedDict):
    """A page of ListFunctions."""

    Functions: list[FunctionConfiguration]
    NextMarker: NotRequired[str]


class FunctionDescription(TypedDict):
    """GetFunction's answer: the configuration, where the code is, and the reserved concurrency (if any)."""

    Configuration: FunctionConfiguration
    Code: dict[str, str]
    Tags: dict[str, str]
    Concurrency: NotRequired[dict[str, int]]


class ControlApi:
    """Read the functions and the account; reserve concurrency."""

    def __init__(
        self,
        functions: Functions,
        function_arn: Callable[[str], str],
        resolve: Callable[[str, str | None], FunctionConfig],
        account_id: str,
    ) -> None:
        self._functions = functions
        self._function_arn = function_arn
        self._account_id = account_id
        self._resolve = resolve
        self._code: dict[str, tuple[int, str]] = {}  # code_dir -> (size, sha256), computed once
        self._code_lock = threading.Lock()
        self._modified = time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())

    def routes(self) -> list[Route]:
        return [
            Route.of("GET", r"^/2015-03-31/functions/?$", self.list_functions),
            Route.of("GET", rf"^/2015-03-31/functions/{_NAME}/configuration/?$", self.get_function_configuration),
            Route.of("GET", rf"^/2015-03-31/functions/{_NAME}/?$", self.get_function),
            Route.of("GET", rf"^/2019-09-30/functions/{_NAME}/concurrency/?$", self.get_function_concurrency),
            Route.of("PUT", rf"^/2017-10-31/functions/{_NAME}/concurrency/?$", self.put_function_concurrency),
            Route.of("DELETE", rf"^/2017-10-31/functions/{_NAME}/concurrency/?$", self.delete_function_concurrency),
            Route.of("GET", r"^/2016-08-19/account-settings/?$", self.get_account_settings),
        ]

    # ----------------------------------------------------------------- functions

    def list_functions(self, request: Request) -> Response:
        raw_max = request.query_param("MaxItems")
        try:
            max_items = int(raw_max) if raw_max is not None else MAX_LIST_ITEMS
        except ValueError:
            max_items = 0
        if not 1 <= max_items <= 10000:
            raise ApiError(400, "InvalidParameterValueException", "MaxItems must be between 1 and 10000")
        names = sorted(self._functions.snapshot())
        marker = request.query_param("Marker")
        if marker:
            after = _unmark(marker)
            names = [n for n in names if n > after]
        page, rest = names[:max_items], names[max_items:]
        body: FunctionList = {"Functions": [self._configuration(self._functions[n]) for n in page]}
        if rest:
            body["NextMarker"] = _mark(page[-1])
        return _ok(request, body)

    def get_function(self, request: Request) -> Response:
        fn = self._function(request)
        body: FunctionDescription = {
            "Configuration": self._configuration(fn),
            "Code": {"RepositoryType": "S3", "Location": Path(fn.code_dir).resolve().as_uri()},
            "Tags": {},
        }
        if fn.reserved_concurrency is not None:
            body["Concurrency"] = {"ReservedConcurrentExecutions": fn.reserved_concurrency}
        return _ok(request, body)

    def get_function_configuration(self, request: Request) -> Response:
        return _ok(request, self._configuration(self._function(request)))

    # ----------------------------------------------------------------- concurrency

    def get_function_concurrency(self, request: Request) -> Response:
        fn = self._function(request)
        reserved = fn.reserved_concurrency
        return _ok(request, {} if reserved is None else {"ReservedConcurrentExecutions": reserved})

    def put_function_concurrency(self, request: Request) -> Response:
        fn = self._function(request)
        try:
            value = json.loads(request.body or b"{}").get("ReservedConcurrentExecutions")
        except (ValueError, AttributeError):
            value = None
        if not isinstance(value, int) or isinstance(value, bool):
            raise ApiError(400, "InvalidParameterValueException", "ReservedConcurrentExecutions must be an integer")
        try:
            self._functions.reserve(fn.name, value)
        except ConcurrencyLimitError as exc:
            raise ApiError(400, "InvalidParameterValueException", str(exc)) from None
        return _ok(request, {"ReservedConcurrentExecutions": value})

    def delete_function_concurrency(self, request: Request) -> Response:
        fn = self._function(request)
        self._functions.reserve(fn.name, None)
        return Response(204, {"x-amzn-RequestId": request.request_id})

    def get_account_settings(self, request: Request) -> Response:
        functions = self._functions.snapshot().values()
        concurrency = self._functions.concurrency
        body = {
            "AccountLimit": {
                "TotalCodeSize": TOTAL_CODE_SIZE,
                "CodeSizeUnzipped": CODE_SIZE_UNZIPPED,
                "CodeSizeZipped": CODE_SIZE_ZIPPED,
                "ConcurrentExecutions": concurrency.limit,
                "UnreservedConcurrentExecutions": concurrency.unreserved(),
            },
            "AccountUsage": {
                "TotalCodeSize": sum(self._code_of(fn)[0] for fn in functions),
                "FunctionCount": len(functions),
            },
        }
        return _ok(request, body)

    # ----------------------------------------------------------------- shapes

    def _function(self, request: Request) -> FunctionConfig:
        return self._resolve(urllib.parse.unquote(request.params["name"]), request.query_param("Qualifier"))

    def _configuration(self, fn: FunctionConfig) -> FunctionConfiguration:
        size, sha = self._code_of(fn)
        return {
            "FunctionName": fn.name,
            "FunctionArn": self._function_arn(fn.name),
            "Runtime": fn.runtime,
            "Role": fn.role or f"arn:aws:iam::{self._account_id}:role/{fn.name}-role",
            "Handler": fn.handler,
            "CodeSize": size,
            "Description": fn.description,
            "Timeout": int(fn.timeout_s),
            "MemorySize": fn.memory_mb,
            "LastModified": self._modified,
            "CodeSha256": sha,
            "Version": LATEST,
            "Environment": {"Variables": dict(fn.environment)},
            "TracingConfig": {"Mode": "PassThrough"},
            "RevisionId": hashlib.sha256(repr(fn).encode()).hexdigest()[:36],
            "State": "Active",
            "LastUpdateStatus": "Successful",
            "PackageType": "Zip",
            "Architectures": [fn.architecture],
            "EphemeralStorage": {"Size": 512},
            "LoggingConfig": {"LogFormat": "Text", "LogGroup": fn.log_group_name},
        }

    def _code_of(self, fn: FunctionConfig) -> tuple[int, str]:
        """Size and base64 SHA-256 of the function's code directory (files in path order)."""
        root = Path(fn.code_dir).resolve()
        with self._code_lock:
            known = self._code.get(str(root))
            if known is not None:
                return known
            digest, size = hashlib.sha256(), 0
            for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                data = path.read_bytes()
                digest.update(os.fsencode(path.relative_to(root)) + b"\0" + data)
                size += len(data)
            self._code[str(root)] = (size, base64.b64encode(digest.digest()).decode())
            return self._code[str(root)]


def _ok(request: Request, body: Mapping[str, object]) -> Response:
    """A 200 answer of the JSON object ``body``."""
    headers = {"Content-Type": "application/json", "x-amzn-RequestId": request.request_id}
    return Response(200, headers, json_bytes(body))


def _mark(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def _unmark(marker: str) -> str:
    try:
        return base64.urlsafe_b64decode(marker.encode()).decode()
    except ValueError:
        raise ApiError(400, "InvalidParameterValueException", "Invalid marker") from None
