"""Bucket names AWS rejects are refused in one line, and an endpoint's query is never echoed.

``Lambdaml_Comm``, ``192.168.1.1`` and ``xn--bad..bucket`` were accepted and failed later, deep in
a client; an ``endpoint_url`` with a credential in its query string was echoed back in an error.
"""

from __future__ import annotations

import pytest

from lambdaml import cli
from lambdaml.config import check_bucket_name, parse_job
from lambdaml.errors import ConfigError

SECRET = "X-Amz-Signature=0123456789abcdef"


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("Lambdaml_Comm", "3-63 lowercase letters"),
        ("ab", "at least 3 characters"),  # pydantic's length check comes first
        ("-bucket", "3-63 lowercase letters"),
        ("b" * 64, "at most 63 characters"),
        ("192.168.1.1", "formatted as an IP address"),
        ("xn--bad..bucket", "no '..'"),
        ("xn--bucket", "reserved by AWS"),
        ("data-s3alias", "reserved by AWS"),
        ("my.-bucket", "no '..', '.-' or '-.'"),
    ],
)
def test_bucket_names_aws_rejects_are_refused(name: str, rule: str) -> None:
    with pytest.raises(ValueError, match="is not an S3 bucket name"):
        check_bucket_name(name)
    for where in ("storage", "channel"):
        data = {"dataset": "d", where: {"bucket": name, **({"kind": "s3"} if where == "channel" else {})}}
        with pytest.raises(ConfigError) as refused:
            parse_job(data, "job.yaml")
        assert f"{where}.bucket: " in str(refused.value) and rule in str(refused.value)


@pytest.mark.parametrize("name", ["lambdaml-data", "a.b.c", "abc", "my-bucket-123", "1bucket"])
def test_bucket_names_aws_accepts_pass(name: str) -> None:
    assert check_bucket_name(name) == name


def test_a_bucket_option_aws_rejects_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["data", "list", "--bucket", "Lambdaml_Comm", "--endpoint-url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bucket: 'Lambdaml_Comm' is not an S3 bucket name" in err[0]


def test_an_endpoints_query_is_never_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:5000/?{SECRET}"
    with pytest.raises(ConfigError) as refused:
        parse_job({"dataset": "d", "storage": {"endpoint_url": url}}, "job.yaml")
    assert SECRET not in str(refused.value) and "(query left out)" in str(refused.value)
    assert cli.main(["data", "list", "--endpoint-url", url]) == 1
    err = capsys.readouterr().err
    assert SECRET not in err and "(query left out)" in err and len(err.strip().splitlines()) == 1
