"""The local Lambda service against unchanged boto3 calls: sync, async, retries, limits, warm reuse.

Handlers are in tests/fixtures_lambda/handlers.py and run under AWS's runtime interface
client (awslambdaric) in processes of their own; nothing here talks to AWS.
"""

from __future__ import annotations

import base64
import json
import os
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
DESTINATION_RECORDS: list[dict[str, Any]] = []


def _functions() -> list[FunctionConfig]:
    def fn(name: str, handler: str, **kw: Any) -> FunctionConfig:
        return FunctionConfig(name, f"handlers.{handler}", CODE, **kw)

    return [
        fn("echo", "echo", timeout_s=5, memory_mb=256, environment={"GREETING": "hi"}),
        fn("warm", "echo"),
        fn("sleepy", "sleep", timeout_s=10),
        fn("short", "sleep", timeout_s=1),
        fn("fail", "fail"),
        fn("crash", "crash"),
        fn("flaky", "flaky"),
        fn("recorder", "record"),
        fn("doomed", "flaky", on_failure="recorder"),
        fn("doomed-cb", "fail", max_retry_attempts=1, on_failure=DESTINATION_RECORDS.append),
        fn("hog", "hog", memory_mb=128),
        fn("single", "sleep", reserved_concurrency=1),
        FunctionConfig("broken", "no_such_module.handler", CODE),
    ]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LambdaService]:
    svc = LambdaService.from_functions(
        _functions(), retry_delays_s=(0.2, 0.4), log_dir=tmp_path_factory.mktemp("lambda-logs")
    )
    with svc:
        yield svc


@pytest.fixture(scope="module")
def client(service: LambdaService) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=service.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=30, connect_timeout=5),
    )


def invoke(client: Any, name: str, event: Any = None, **kwargs: Any) -> tuple[dict[str, Any], Any]:
    response = client.invoke(FunctionName=name, Payload=json.dumps(event or {}).encode(), **kwargs)
    raw = response["Payload"].read()
    return response, json.loads(raw) if raw else None


def records_of(service: LambdaService, request_id: str) -> list[Any]:
    return [r for r in service.invocations() if r.request_id == request_id]


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return False


def test_request_response_returns_payload_and_context(service: LambdaService, client: Any) -> None:
    response, body = invoke(client, "echo", {"x": [1, 2]})
    assert response["StatusCode"] == 200
    assert "FunctionError" not in response
    assert response["ExecutedVersion"] == "$LATEST"
    assert body["event"] == {"x": [1, 2]}
    assert body["request_id"] == response["ResponseMetadata"]["RequestId"]
    assert body["function_name"] == "echo"
    assert int(body["memory_limit_in_mb"]) == 256
    assert body["invoked_function_arn"] == service.function_arn("echo")
    assert 4000 < body["remaining_ms"] <= 5000  # about the configured 5 s timeout
    assert body["env"]["GREETING"] == "hi" and body["env"]["AWS_REGION"] == "us-east-1"
    assert body["env"]["LAMBDA_TASK_ROOT"] == str(CODE)

    by_arn, body2 = invoke(client, service.function_arn("echo"), {"y": 1}, Qualifier="$LATEST")
    assert by_arn["StatusCode"] == 200 and body2["event"] == {"y": 1}


def test_second_invocation_is_warm(service: LambdaService, client: Any) -> None:
    first, body1 = invoke(client, "warm")
    second, body2 = invoke(client, "warm")
    assert body1["pid"] == body2["pid"]
    rec1 = records_of(service, first["ResponseMetadata"]["RequestId"])
    rec2 = records_of(service, second["ResponseMetadata"]["RequestId"])
    assert [r.cold for r in rec1] == [True] and [r.cold for r in rec2] == [False]
    assert rec1[0].init_duration_ms is not None and rec1[0].init_duration_ms > 0
    assert rec2[0].init_duration_ms is None
    for rec in rec1 + rec2:
        assert rec.status == "success" and rec.pid == body1["pid"] and rec.memory_mb == 128
        assert rec.billed_duration_ms >= rec.duration_ms and rec.end >= rec.start


def test_concurrent_invocations_run_in_parallel(client: Any) -> None:
    results: list[dict[str, Any]] = []

    def one() -> None:
        results.append(invoke(client, "sleepy", {"seconds": 1.5})[1])

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4
    assert len({r["pid"] for r in results}) == 4
    assert max(r["start"] for r in results) < min(r["end"] for r in results)  # all four overlapped


def test_handler_exception_is_an_unhandled_function_error(service: LambdaService, client: Any) -> None:
    response, body = invoke(client, "fail", {"message": "bad input"})
    assert response["StatusCode"] == 200
    assert response["FunctionError"] == "Unhandled"
    assert body["errorMessage"] == "bad input" and body["errorType"] == "ValueError"
    assert body["stackTrace"]
    (rec,) = records_of(service, response["ResponseMetadata"]["RequestId"])
    assert rec.status == "error" and rec.error_type == "ValueError"
    again, _ = invoke(client, "fail")  # the runtime survives a handler exception
    assert records_of(service, again["ResponseMetadata"]["RequestId"])[0].pid == rec.pid


def test_timeout_kills_the_runtime(service: LambdaService, client: Any) -> None:
    start = time.monotonic()
    response, body = invoke(client, "short", {"seconds": 10})
    elapsed = time.monotonic() - start
    # Cut at its 1 s timeout, not after the 10 s it asked for; the margin is for a loaded machine.
    assert 1.0 <= elapsed < 6.0
    assert response["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Sandbox.Timedout"
    assert body["errorMessage"].endswith("Task timed out after 1.00 seconds")
    (rec,) = records_of(service, response["ResponseMetadata"]["RequestId"])
    assert rec.status == "timeout" and rec.pid is not None
    assert rec.billed_duration_ms >= 1000
    assert wait_gone(rec.pid)
    _, ok = invoke(client, "short", {"seconds": 0})
    assert ok["pid"] != rec.pid


def test_unknown_function_is_resource_not_found(client: Any) -> None:
    with pytest.raises(ClientError) as info:
        client.invoke(FunctionName="no-such-function", Payload=b"{}")
    error = info.value.response
    assert error["Error"]["Code"] == "ResourceNotFoundException"
    assert "Function not found" in error["Error"]["Message"]
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as info:
        client.invoke(FunctionName="echo", Qualifier="7", Payload=b"{}")
    assert info.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_dry_run_and_invalid_payload(client: Any) -> None:
    assert client.invoke(FunctionName="echo", InvocationType="DryRun")["StatusCode"] == 204
    with pytest.raises(ClientError) as info:
        client.invoke(FunctionName="echo", Payload=b"{not json")
    assert info.value.response["Error"]["Code"] == "InvalidRequestContentException"


def test_init_error_is_reported(client: Any) -> None:
    response, body = invoke(client, "broken")
    assert response["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.ImportModuleError"


def test_event_invocation_returns_202_and_runs(service: LambdaService, client: Any, tmp_path: Path) -> None:
    event = {"marker_dir": str(tmp_path), "id": "once", "fail_times": 0}
    response = client.invoke(FunctionName="flaky", InvocationType="Event", Payload=json.dumps(event).encode())
    assert response["StatusCode"] == 202
    assert service.wait_idle(15)
    assert (tmp_path / "once.done").read_text() == "1"
    (rec,) = records_of(service, response["ResponseMetadata"]["RequestId"])
    assert rec.invocation_type == "Event" and rec.status == "success"


@pytest.mark.parametrize("crash", [False, True], ids=["raise", "sigkill"])
def test_event_retries_until_third_attempt_succeeds(
    service: LambdaService, client: Any, tmp_path: Path, crash: bool
) -> None:
    event = {"marker_dir": str(tmp_path), "id": "retry", "fail_times": 2, "crash": crash}
    response = client.invoke(FunctionName="flaky", InvocationType="Event", Payload=json.dumps(event).encode())
    request_id = response["ResponseMetadata"]["RequestId"]
    assert service.wait_idle(20)
    assert (tmp_path / "retry.done").read_text() == "3"
    attempts = [json.loads(line) for line in (tmp_path / "retry.attempts").read_text().splitlines()]
    assert [a["request_id"] for a in attempts] == [request_id] * 3  # retries keep the request id, as on AWS
    recs = records_of(service, request_id)
    assert [r.attempt for r in recs] == [1, 2, 3]
    failed = "crash" if crash else "error"
    assert [r.status for r in recs] == [failed, failed, "success"]
    assert recs[1].start - recs[0].end >= 0.2 and recs[2].start - recs[1].end >= 0.4  # the retry delays


def test_exhausted_event_goes_to_function_destination(service: LambdaService, client: Any, tmp_path: Path) -> None:
    event = {"marker_dir": str(tmp_path), "id": "doomed", "fail_times": 99}
    response = client.invoke(FunctionName="doomed", InvocationType="Event", Payload=json.dumps(event).encode())
    request_id = response["ResponseMetadata"]["RequestId"]
    assert service.wait_idle(20)
    assert len((tmp_path / "doomed.attempts").read_text().splitlines()) == 3
    record = json.loads((tmp_path / "doomed.destination.json").read_text())
    assert record["version"] == "1.0" and record["timestamp"].endswith("Z")
    assert record["requestContext"] == {
        "requestId": request_id,
        "functionArn": service.function_arn("doomed") + ":$LATEST",
        "condition": "RetriesExhausted",
        "approximateInvokeCount": 3,
    }
    assert record["requestPayload"] == event
    assert record["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
    assert record["responsePayload"]["errorType"] == "RuntimeError"


def test_exhausted_event_goes_to_callable_destination(service: LambdaService, client: Any) -> None:
    DESTINATION_RECORDS.clear()
    response = client.invoke(FunctionName="doomed-cb", InvocationType="Event", Payload=b'{"message": "no"}')
    assert service.wait_idle(20)
    (record,) = DESTINATION_RECORDS
    assert record["requestContext"]["requestId"] == response["ResponseMetadata"]["RequestId"]
    assert record["requestContext"]["approximateInvokeCount"] == 2  # max_retry_attempts=1
    assert record["responsePayload"]["errorMessage"] == "no"


def test_crash_mid_invocation_then_a_new_runtime(service: LambdaService, client: Any) -> None:
    _, before = invoke(client, "crash")
    response, body = invoke(client, "crash", {"crash": True})
    assert response["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.ExitError" and body["errorMessage"].endswith("signal: killed")
    assert records_of(service, response["ResponseMetadata"]["RequestId"])[0].status == "crash"
    _, after = invoke(client, "crash")
    assert after["pid"] != before["pid"]
    response, body = invoke(client, "crash", {"crash": True, "exit": 3})
    assert body["errorMessage"].endswith("exit status 3")


def test_remaining_time_decreases_from_the_timeout(client: Any) -> None:
    _, body = invoke(client, "sleepy", {"seconds": 0.3})
    assert 9000 < body["remaining_before"] <= 10000
    assert body["remaining_before"] - body["remaining_after"] >= 250


def test_memory_limit_is_enforced(service: LambdaService, client: Any) -> None:
    start = time.monotonic()
    response, body = invoke(client, "hog", {"mb": 300, "hold_s": 10})
    assert time.monotonic() - start < 5
    assert response["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.OutOfMemory"
    assert records_of(service, response["ResponseMetadata"]["RequestId"])[0].status == "oom"


def test_reserved_concurrency_throttles(client: Any) -> None:
    outcomes: list[str] = []

    def one() -> None:
        try:
            invoke(client, "single", {"seconds": 1.0})
            outcomes.append("ok")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["TooManyRequestsException", "ok"]


def test_invocation_log_files(service: LambdaService, client: Any, tmp_path: Path) -> None:
    response, _ = invoke(client, "echo", LogType="Tail")
    request_id = response["ResponseMetadata"]["RequestId"]
    tail = base64.b64decode(response["LogResult"]).decode()
    assert f"START RequestId: {request_id}" in tail and f"REPORT RequestId: {request_id}" in tail
    lines = [json.loads(line) for line in service.invocation_log_path.read_text().splitlines()]
    assert any(rec["request_id"] == request_id and rec["billed_duration_ms"] >= 1 for rec in lines)
    dumped = json.loads(service.write_invocation_log(tmp_path / "log.json").read_text())
    assert {rec["request_id"] for rec in dumped} == {rec["request_id"] for rec in lines}
    assert service.log_dir is not None and "END RequestId" in (service.log_dir / "echo.log").read_text()


def test_stop_kills_every_runtime(tmp_path: Path) -> None:
    svc = LambdaService([FunctionConfig("echo", "handlers.echo", CODE)], log_dir=tmp_path)
    with svc:
        assert svc.prewarm("echo", 2) == 2
        url = svc.url
        lambda_client = boto3.client(
            "lambda",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        _, body = invoke(lambda_client, "echo")
        assert svc.invocations()[0].cold is False  # a prewarmed sandbox
    assert wait_gone(body["pid"])


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="handler"):
        FunctionConfig("f", "nodot", CODE)
    with pytest.raises(ConfigError, match="reserved"):
        FunctionConfig("f", "handlers.echo", CODE, environment={"AWS_REGION": "x"})
    with pytest.raises(ConfigError, match="unknown function"):
        LambdaService([FunctionConfig("f", "handlers.echo", CODE, on_failure="nope")])
