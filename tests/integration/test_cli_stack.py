"""``lambdaml train/status --stack`` on a local stack whose record points at a real moto: a stack
created on moto's CloudFormation (its data bucket and outputs), a memcached cache recorded as
``lambdaml local up --cache memcached`` records one. Nothing here leaves 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lambdaml import aws, cli
from lambdaml.backends.stack import resolve_stack, stack_store
from lambdaml.config import parse_job
from lambdaml.runtime.heartbeat import Heartbeat
from lambdaml.runtime.records import claim_job
from tests.helpers import unique_name


@pytest.fixture
def memcached_stack(moto_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    name, bucket = unique_name("mc"), unique_name("data")
    template = {
        "Resources": {"Data": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": bucket}}},
        "Outputs": {
            "DataBucketName": {"Value": {"Ref": "Data"}},
            "CommBucketName": {"Value": {"Ref": "Data"}},
            "ChannelTableName": {"Value": "comm"},
            "CoordinatorFunctionName": {"Value": f"{name}-coordinator"},
        },
    }
    cloudformation = aws.client("cloudformation", endpoint_url=moto_url)
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    aws.wait_for_stack(cloudformation, name, timeout_s=60)
    record = {
        "name": name,
        "region": "us-east-1",
        "endpoints": {service: moto_url for service in ("s3", "dynamodb", "cloudformation", "lambda")},
        "outputs": {"CacheEndpoint": "127.0.0.1:11311", "CacheKind": "memcached"},
        "pids": [],
    }
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / f"{name}.json").write_text(json.dumps(record))
    try:
        yield name
    finally:
        cloudformation.delete_stack(StackName=name)


def test_a_redis_job_on_a_memcached_stack_is_refused_before_anything_starts(
    memcached_stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"dataset": "d", "workers": 2, "channel": {"kind": "redis"}}))
    assert cli.main(["train", str(path), "--stack", memcached_stack]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"error: stack '{memcached_stack}': the job's channel is redis, but this stack's cache is memcached\n"
    )
    assert "Protocol" not in captured.err and captured.out == ""  # not even the banner: nothing was started
    assert stack_store(resolve_stack(memcached_stack)).list("jobs/") == []


@pytest.mark.parametrize("output", ["table", "json"])
def test_status_of_a_job_on_the_stack(memcached_stack: str, output: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = stack_store(resolve_stack(memcached_stack))
    job = parse_job({"dataset": "d", "workers": 2, "algorithm": {"epochs": 1000}})
    job_id = unique_name("job")
    attempt = claim_job(store, job, job_id, "v1")
    beat = Heartbeat(store, attempt)
    beat(0, 999, 1_234_567.0, 35_999.0)
    beat(1, 998, 0.25, 35_998.0)
    assert cli.main(["status", job_id, "--stack", memcached_stack, "--output", output]) == 0
    out = capsys.readouterr().out
    if output == "json":
        status = json.loads(out)
        assert status["state"] == "running" and status["epochs"] == 1000
        assert sorted((b["rank"], b["epoch"]) for b in status["heartbeats"]) == [(0, 999), (1, 998)]
    else:
        assert out.startswith(f"job {job_id}: running\n")
        assert "999/1000  1234567.00000" in out and "998/1000        0.25000" in out, out
        assert "…" not in out


def test_a_name_that_is_neither_local_nor_deployed_says_so_in_one_line(
    moto_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Credentials, and boto3's own endpoint variable pointing "AWS" CloudFormation at moto.
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDFORMATION", moto_url)
    assert cli.main(["status", "job-1", "--stack", "nowhere"]) == 1
    assert capsys.readouterr().err == "error: unknown stack 'nowhere': not deployed in us-east-1; local stacks: none\n"
