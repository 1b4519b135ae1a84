"""The real AWS CLI against the local Lambda service: the answers have AWS's shapes and error codes.

The CLI lives in a tool venv of its own (``make awscli-env``), with dummy credentials and no
configuration files, so nothing it does can reach AWS.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambdaml.local.lambda_service import FunctionConfig, LambdaService

ROOT = Path(__file__).resolve().parents[2]
AWS = ROOT / ".venv-awscli" / "bin" / "aws"
CODE = ROOT / "tests" / "fixtures_lambda"
pytestmark = [
    pytest.mark.skipif(not AWS.exists(), reason="needs the AWS CLI tool venv: make awscli-env"),
    pytest.mark.timeout(120),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LambdaService]:
    functions = [
        FunctionConfig("echo", "handlers.echo", CODE, timeout_s=5, environment={"GREETING": "hi"}),
        FunctionConfig("fail", "handlers.fail", CODE, reserved_concurrency=2),
    ]
    with LambdaService(functions, max_concurrency=10, log_dir=tmp_path_factory.mktemp("logs")) as svc:
        yield svc


def aws(service: LambdaService, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd or ROOT),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    command = [str(AWS), "--endpoint-url", service.url, "--output", "json", "lambda", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


def parsed(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_list_functions_and_get_function(service: LambdaService) -> None:
    listed = parsed(aws(service, "list-functions"))
    assert [f["FunctionName"] for f in listed["Functions"]] == ["echo", "fail"]
    assert listed["Functions"][0]["FunctionArn"] == service.function_arn("echo")
    # The CLI pages through ListFunctions itself: one item a page still lists both.
    assert [f["FunctionName"] for f in parsed(aws(service, "list-functions", "--page-size", "1"))["Functions"]] == [
        "echo",
        "fail",
    ]
    got = parsed(aws(service, "get-function", "--function-name", "echo"))
    assert got["Configuration"]["Handler"] == "handlers.echo" and got["Configuration"]["Timeout"] == 5
    assert got["Configuration"]["Environment"]["Variables"] == {"GREETING": "hi"}
    assert parsed(aws(service, "get-function", "--function-name", "fail"))["Concurrency"] == {
        "ReservedConcurrentExecutions": 2
    }
    settings = parsed(aws(service, "get-account-settings"))["AccountLimit"]
    assert (settings["ConcurrentExecutions"], settings["UnreservedConcurrentExecutions"]) == (10, 8)


def test_invoke_and_a_function_error(service: LambdaService, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = aws(
        service,
        "invoke",
        "--function-name",
        "echo",
        "--payload",
        '{"x": 1}',  # CLI v1 sends the payload as given (v2 would want base64)
        "--log-type",
        "Tail",
        str(out),
    )
    meta = parsed(done)
    assert meta["StatusCode"] == 200 and meta["ExecutedVersion"] == "$LATEST"
    assert "REPORT RequestId:" in base64.b64decode(meta["LogResult"]).decode()
    assert json.loads(out.read_text())["event"] == {"x": 1}
    failed = parsed(aws(service, "invoke", "--function-name", "fail", str(out)))
    assert failed["FunctionError"] == "Unhandled" and "errorMessage" in json.loads(out.read_text())


def test_a_missing_function_is_resource_not_found(service: LambdaService, tmp_path: Path) -> None:
    for args in (("get-function", "--function-name", "nope"), ("invoke", "--function-name", "nope", "out.json")):
        done = aws(service, *args, cwd=tmp_path)
        assert done.returncode != 0
        assert "ResourceNotFoundException" in done.stderr and service.function_arn("nope") in done.stderr
