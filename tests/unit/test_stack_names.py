"""A stack named on the command line: a local stack that is down, or a name known nowhere, is one line
that says so; a local stack's name never reaches AWS, and nothing here connects outside 127.0.0.0/8."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambdaml import aws, cli
from lambdaml.errors import ConfigError
from lambdaml.local.services import free_port
from lambdaml.platforms.aws_lambda import find as remote

NO_CREDENTIALS = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """LAMBDAML_HOME of this test's own, and a machine without AWS credentials or instance metadata."""
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    for name in NO_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "stacks").mkdir()
    return tmp_path


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every address a socket of this process connects to while the test runs (the connection still happens)."""
    seen: list[Any] = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def recorded(method: Any) -> Any:
        def call(self: socket.socket, address: Any) -> Any:
            seen.append(address)
            return method(self, address)

        return call

    monkeypatch.setattr(socket.socket, "connect", recorded(connect))
    monkeypatch.setattr(socket.socket, "connect_ex", recorded(connect_ex))
    yield seen


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """The (service, endpoint) of every boto3 client built while the test runs."""
    built: list[tuple[str, str | None]] = []
    build = aws.client

    def client(service: str, **kwargs: Any) -> Any:
        built.append((service, kwargs.get("endpoint_url")))
        return build(service, **kwargs)

    monkeypatch.setattr(aws, "client", client)
    return built


def record(home: Path, name: str, **endpoints: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the stack is down
    urls = {"s3": dead, "dynamodb": dead, "cloudformation": dead, "lambda": f"http://127.0.0.1:{free_port()}"}
    urls.update(endpoints)
    data = {"name": name, "region": "us-east-1", "endpoints": urls, "outputs": {}, "pids": []}
    (home / "stacks" / f"{name}.json").write_text(json.dumps(data))


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "job-1", "--stack", "gone"],
        ["cancel", "job-1", "--stack", "gone"],
        ["train", "job.yaml", "--stack", "gone"],
        ["data", "prepare", "d", "--synthetic", "higgs", "--shards", "1", "--stack", "gone"],
    ],
    ids=["status", "cancel", "train", "data-prepare"],
)
def test_a_local_stack_that_is_down_is_named_in_one_line_and_never_looked_for_on_aws(
    home: Path,
    connections: list[Any],
    clients: list[tuple[str, str | None]],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    record(home, "gone")
    assert cli.main(argv) == 1
    line = one_line(capsys)
    assert line.startswith("error: local stack 'gone' is down (nothing answers at http://127.0.0.1:"), line
    assert line.endswith("start it with: lambdaml local up --name gone")
    assert "credential" not in line.lower()
    assert clients == []  # not even moto's CloudFormation was asked: the port was tried first
    assert connections and all(host == "127.0.0.1" for host, _ in connections), connections


def test_an_unknown_name_without_credentials_lists_the_local_stacks(
    home: Path, connections: list[Any], clients: list[tuple[str, str | None]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["status", "job-1", "--stack", "prod"]) == 1
    assert one_line(capsys).startswith("error: unknown stack 'prod'; local stacks: none (and no AWS credentials")
    record(home, "b")
    record(home, "a")
    assert cli.main(["status", "job-1", "--stack", "prod"]) == 1
    assert one_line(capsys).startswith("error: unknown stack 'prod'; local stacks: a, b (and no AWS credentials")
    assert clients == [] and connections == []  # credentials were looked for on this machine only


@pytest.mark.parametrize(
    "endpoints",
    [{"cloudformation": "https://cloudformation.us-east-1.amazonaws.com"}, {"s3": "http://10.0.0.7:5000"}],
    ids=["aws-cloudformation", "remote-s3"],
)
def test_a_local_record_that_points_away_from_loopback_is_refused(
    home: Path, connections: list[Any], endpoints: dict[str, str]
) -> None:
    record(home, "odd", **endpoints)
    with pytest.raises(ConfigError, match=r"local stack 'odd': .* names no loopback endpoints"):
        remote.resolve_stack("odd")
    assert connections == []


def test_a_local_record_without_cloudformation_is_refused(home: Path) -> None:
    (home / "stacks" / "half.json").write_text(json.dumps({"endpoints": {"s3": "http://127.0.0.1:1"}}))
    with pytest.raises(ConfigError, match="names no loopback endpoints"):
        remote.resolve_stack("half")


def test_a_stack_is_up_when_every_endpoint_accepts_a_connection(home: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        dead = f"http://127.0.0.1:{free_port()}"
        assert remote.refusing_endpoint({"endpoints": {"s3": url, "cloudformation": url}}) is None
        assert remote.refusing_endpoint({"endpoints": {"s3": url, "lambda": dead}}) == dead


def test_local_up_refuses_a_stack_that_is_up_and_replaces_one_that_went_down(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from lambdaml.local import stack

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        record(home, "live", s3=url, dynamodb=url, cloudformation=url, **{"lambda": url})
        with pytest.raises(ConfigError, match="local stack 'live' is already up"):
            stack.up("live")
    # Down now: up forgets the stale record and starts afresh (here it stops at building the
    # functions of a template that is not there, or, where build/ holds a fresh build, at
    # translating it without the SAM translator).
    monkeypatch.setattr(stack, "ROOT", tmp_path / "no-tree")
    stopped = r"building the functions \(sam build\) failed|sam is missing|the SAM translator is missing"
    with pytest.raises(ConfigError, match=stopped):
        stack.up("live")
    assert not (home / "stacks" / "live.json").exists()
