"""Lines the command prints that must say what is so: the transport a job runs over, counts that
agree with their nouns, a resumed job's time over all its attempts, and the cost of a job that
ended without a result, said to be an estimate."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
from rich.console import Console

from lambdaml.backends.iaas import IaaSLocalBackend
from lambdaml.backends.local import LocalBackend
from lambdaml.cli import output
from lambdaml.cli.output import jobs_table, plural, print_result
from lambdaml.cli.train import announce
from lambdaml.config import parse_job
from lambdaml.runtime.registry import JobRecord
from lambdaml.runtime.reports import JobResult


def test_plural() -> None:
    assert [plural(n, "epoch") for n in (0, 1, 2)] == ["0 epochs", "1 epoch", "2 epochs"]
    assert plural(1.0, "epoch", spec="g") == "1 epoch" and plural(2.5, "epoch", spec="g") == "2.5 epochs"
    assert plural(1, "class", "classes") == "1 class" and plural(3, "class", "classes") == "3 classes"
    assert plural(12_000, "row", spec=",") == "12,000 rows"


def _announced(backend: Any, workers: int, capsys: pytest.CaptureFixture[str], **job: Any) -> str:
    spec = parse_job({"dataset": "d", "workers": workers, "channel": {"kind": "redis"}, **job})
    announce(spec, backend, "j-1", "job")
    return capsys.readouterr().out.strip()


def test_an_iaas_job_says_it_runs_over_gloo(capsys: pytest.CaptureFixture[str]) -> None:
    storage = parse_job({"dataset": "d"}).storage
    line = _announced(IaaSLocalBackend(storage), 4, capsys)
    assert line == "job j-1: training lr with ga_sgd on 4 workers over gloo (bsp)"
    line = _announced(LocalBackend(storage), 4, capsys)
    assert line == "job j-1: training lr with ga_sgd on 4 workers over redis (bsp, auto)"


def test_one_worker_is_one_worker(capsys: pytest.CaptureFixture[str]) -> None:
    storage = parse_job({"dataset": "d"}).storage
    assert " on 1 worker over " in _announced(LocalBackend(storage), 1, capsys)


def _result(**change: Any) -> JobResult:
    data: dict[str, Any] = {
        "job_id": "j-1",
        "backend": "local",
        "started_at": "2026-12-01T11:04:14+00:00",
        "finished_at": "2026-12-01T11:05:14+00:00",
        "wall_time_s": 8.21,
        "spec": {"name": "j", "workers": 1, "channel": {"kind": "redis"}},
        "dataset": {"name": "d", "train_rows": 10, "test_rows": 0},
        "model_uri": "s3://b/jobs/j-1/model",
        "ranks_agree": True,
        "loss_curve": [{"epoch": 1, "loss": 0.5, "elapsed_s": 8.0}],
        "workers": [],
        "cost": {
            "total_dollars": 0.001,
            "prices_checked": "2024-11",
            "lambda": {"invocations": 1, "cold_starts": 1, "gb_seconds": 1.0, "dollars": 0.0009},
            "channel": {"kind": "redis", "requests": 1, "dollars": 0.0001},
        },
    }
    data.update(change)
    return JobResult.from_json(copy.deepcopy(data))


def _printed(result: JobResult, capsys: pytest.CaptureFixture[str]) -> str:
    print_result(result)
    return capsys.readouterr().out


def test_a_resumed_job_reports_the_time_of_all_its_attempts(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(_result(attempt=2, attempts_wall_time_s=70.93), capsys)
    assert "job j-1 finished in 8.2s (70.9s over 2 attempts); model at s3://b/jobs/j-1/model" in out
    assert "job j-1 finished in 8.2s; model at" in _printed(_result(), capsys)


def test_a_single_invocation_and_request_are_singular(capsys: pytest.CaptureFixture[str]) -> None:
    out = _printed(_result(), capsys)
    assert "Lambda 1 invocation (1 cold)" in out and "redis 1 request ($" in out


def _record(**fields: Any) -> dict[str, Any]:
    status = {"state": "cancelled", "attempt": 1, "created_at": 100.0, "updated_at": 107.6, "workers": 4, **fields}
    return JobRecord.from_status("j-1", status).summary(200.0)


def test_a_job_that_ended_without_a_result_shows_its_estimated_cost() -> None:
    estimated = _record(cost_dollars=0.0012, cost_estimated=True)
    assert estimated["cost_estimated"] is True
    assert JobRecord.from_status("j", {"state": "x", "updated_at": 1, "cost_estimated": "True"}).cost_estimated
    billed = {**_record(cost_dollars=0.0034), "job_id": "j-2", "state": "succeeded"}
    unknown = {**_record(), "job_id": "j-3"}
    console = Console(width=80, record=True, file=io.StringIO(), highlight=False, markup=False, emoji=False)
    console.print(jobs_table([estimated, billed, unknown], now=200.0))
    text = console.export_text()
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("j-")}
    assert lines["j-1"].endswith("~$0.001200") and lines["j-2"].endswith("$0.003400") and lines["j-3"].endswith("-")
    assert output.ESTIMATED in text and max(map(len, text.splitlines())) <= 80
    console = Console(width=80, record=True, file=io.StringIO(), highlight=False, markup=False, emoji=False)
    console.print(jobs_table([billed], now=200.0))
    assert output.ESTIMATED not in console.export_text()  # the line is there only for a row it explains
