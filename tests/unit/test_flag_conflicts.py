"""Flags that contradict each other, or a value outside what AWS allows, are refused in one line
(exit 1) before anything runs, rather than one of them silently ignored."""

from __future__ import annotations

import pytest

from lambdaml import cli
from tests.helpers import cli_error_line as one_line


@pytest.mark.parametrize("backend", ["iaas-local", "local"])
def test_train_refuses_a_backend_next_to_a_stack(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Once, the stack's Lambda functions ran the job whatever --backend said.
    one_line(["train", "job.yaml", "--stack", "nosuchstack", "--backend", backend], capsys, "--backend", "--stack")


@pytest.mark.parametrize(
    "flag", [["--bucket", "other-bucket"], ["--endpoint-url", "http://127.0.0.1:1"], ["--region", "eu-west-1"]]
)
def test_jobs_refuses_a_storage_option_next_to_a_stack(flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # Once, --bucket was ignored and the stack's jobs listed.
    one_line(["jobs", "--stack", "nosuchstack", *flag], capsys, flag[0], "--stack", "conflict")


@pytest.mark.parametrize("memory", ["3", "127", "10241"])
def test_advise_refuses_a_memory_lambda_does_not_offer(memory: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", "--model", "lr", "--features", "28", "--samples", "1e5", "--memory", f"3008,{memory}"]
    one_line(argv, capsys, "128", "10240", memory)


def test_advise_takes_lambdas_least_and_most_memory(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", "--model", "lr", "--features", "28", "--samples", "1e5", "--memory", "128,10240"]
    assert cli.main([*argv, "--output", "json"]) == 0
    assert "error" not in capsys.readouterr().err
