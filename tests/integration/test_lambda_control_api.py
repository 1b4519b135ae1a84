"""The local Lambda service's control plane and account concurrency, through unchanged boto3 calls.

Functions are listed, read and given reserved concurrency as on AWS, and the account's limit
is enforced as Lambda counts it: busy executions only, reserved functions apart, the others
sharing what is left. Busy functions hold until the test releases them, so nothing depends
on timing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from lambdaml.errors import ConfigError
from lambdaml.local.lambda_service import FunctionConfig, LambdaService

pytestmark = pytest.mark.timeout(120)

CODE = Path(__file__).resolve().parents[1] / "fixtures_lambda"
LIMIT = 3


def _client(url: str) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=90, connect_timeout=5),
    )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LambdaService]:
    functions = [
        FunctionConfig("alpha", "handlers.hold", CODE, timeout_s=90, environment={"K": "v"}, description="first"),
        FunctionConfig("beta", "handlers.hold", CODE, timeout_s=90, memory_mb=256, architecture="arm64"),
        FunctionConfig("gamma", "handlers.echo", CODE),
        FunctionConfig("delta", "handlers.echo", CODE, reserved_concurrency=1),
    ]
    with LambdaService(
        functions, max_concurrency=LIMIT, unreserved_minimum=1, retry_delays_s=(0.1, 0.2), log_dir=tmp_path / "logs"
    ) as svc:
        yield svc


def _error(call: Any, **kwargs: Any) -> tuple[int, str, dict[str, Any]]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    response = info.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"], response


def _wait_for(path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout_s:g}s"
        time.sleep(0.01)


class Holder:
    """A synchronous invocation of a hold function, in a thread, busy until released."""

    def __init__(self, client: Any, name: str, where: Path) -> None:
        self.started, self.release = where / f"{name}-started", where / f"{name}-release"
        self.outcome: Any = None
        event = {"started": str(self.started), "release": str(self.release)}

        def run() -> None:
            try:
                response = client.invoke(FunctionName=name, Payload=json.dumps(event).encode())
                self.outcome = json.loads(response["Payload"].read())
            except ClientError as exc:
                self.outcome = exc.response["Error"]["Code"]

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def busy(self) -> Holder:
        _wait_for(self.started)
        return self

    def done(self) -> Any:
        self.release.touch()
        self.thread.join(60)
        return self.outcome


def test_list_and_get_functions_as_aws_shapes_them(service: LambdaService) -> None:
    client = _client(service.url)
    first = client.list_functions(MaxItems=3)
    assert [f["FunctionName"] for f in first["Functions"]] == ["alpha", "beta", "delta"]
    rest = client.list_functions(MaxItems=3, Marker=first["NextMarker"])
    assert [f["FunctionName"] for f in rest["Functions"]] == ["gamma"] and "NextMarker" not in rest
    paged = [f["FunctionName"] for page in client.get_paginator("list_functions").paginate() for f in page["Functions"]]
    assert paged == ["alpha", "beta", "delta", "gamma"]

    alpha = client.get_function(FunctionName="alpha")
    config = alpha["Configuration"]
    assert config["FunctionArn"] == service.function_arn("alpha")
    assert (config["Runtime"], config["Handler"], config["Timeout"], config["MemorySize"]) == (
        "python3.11",
        "handlers.hold",
        90,
        128,
    )
    assert config["Environment"] == {"Variables": {"K": "v"}} and config["Description"] == "first"
    assert config["State"] == "Active" and config["PackageType"] == "Zip" and config["CodeSize"] > 0
    assert config["LoggingConfig"]["LogGroup"] == "/aws/lambda/alpha"
    assert alpha["Code"]["Location"].startswith("file://") and "Concurrency" not in alpha
    assert client.get_function_configuration(FunctionName=service.function_arn("beta"))["Architectures"] == ["arm64"]
    assert client.get_function(FunctionName="delta")["Concurrency"] == {"ReservedConcurrentExecutions": 1}

    for call in (client.get_function, client.get_function_configuration, client.get_function_concurrency):
        status, code, response = _error(call, FunctionName="nope")
        assert (status, code) == (404, "ResourceNotFoundException")
        assert service.function_arn("nope") in response["Error"]["Message"]
    assert _error(client.list_functions, MaxItems=20000)[:2] == (400, "InvalidParameterValueException")


def test_reserved_concurrency_and_account_settings(service: LambdaService) -> None:
    client = _client(service.url)
    limits = client.get_account_settings()["AccountLimit"]
    assert (limits["ConcurrentExecutions"], limits["UnreservedConcurrentExecutions"]) == (LIMIT, LIMIT - 1)
    assert client.get_account_settings()["AccountUsage"]["FunctionCount"] == 4

    assert client.get_function_concurrency(FunctionName="alpha").get("ReservedConcurrentExecutions") is None
    assert (
        client.put_function_concurrency(FunctionName="alpha", ReservedConcurrentExecutions=1)[
            "ReservedConcurrentExecutions"
        ]
        == 1
    )
    assert client.get_function_concurrency(FunctionName="alpha")["ReservedConcurrentExecutions"] == 1
    assert client.get_account_settings()["AccountLimit"]["UnreservedConcurrentExecutions"] == LIMIT - 2
    # A third reservation would leave less than the unreserved minimum (1 here; AWS keeps 100).
    status, code, response = _error(
        client.put_function_concurrency, FunctionName="beta", ReservedConcurrentExecutions=1
    )
    assert (status, code) == (400, "InvalidParameterValueException")
    assert "below its minimum value of [1]" in response["Error"]["Message"]
    client.delete_function_concurrency(FunctionName="alpha")
    assert client.get_account_settings()["AccountLimit"]["UnreservedConcurrentExecutions"] == LIMIT - 1


def test_the_account_limit_is_shared_by_unreserved_functions(service: LambdaService, tmp_path: Path) -> None:
    client = _client(service.url)
    # delta reserves 1 of the 3, so alpha and beta share 2: one each fills them.
    alpha = Holder(client, "alpha", tmp_path).busy()
    beta = Holder(client, "beta", tmp_path).busy()
    status, code, response = _error(client.invoke, FunctionName="gamma", Payload=b"{}")
    assert (status, code) == (429, "TooManyRequestsException")
    assert response["Reason"] == "ConcurrentInvocationLimitExceeded"
    # The reserved function is not held back by the others ...
    assert json.loads(client.invoke(FunctionName="delta", Payload=b"{}")["Payload"].read())["event"] == {}
    # ... and an Event invocation while throttled waits for room, as AWS retries throttled async events.
    assert client.invoke(FunctionName="gamma", InvocationType="Event", Payload=b'{"late": 1}')["StatusCode"] == 202
    assert alpha.done()["released"] is True
    assert service.wait_idle(60)
    assert [r.status for r in service.invocations("gamma")] == ["success"]
    assert beta.done()["released"] is True
    # An idle warm sandbox is not an execution: both shared slots are free again.
    assert json.loads(client.invoke(FunctionName="gamma", Payload=b"{}")["Payload"].read())["event"] == {}


def test_a_reservation_the_account_cannot_hold_is_refused_at_start(tmp_path: Path) -> None:
    functions = [FunctionConfig("big", "handlers.echo", CODE, reserved_concurrency=5)]
    with pytest.raises(ConfigError, match="below its minimum value"):
        LambdaService(functions, max_concurrency=4, log_dir=tmp_path)
