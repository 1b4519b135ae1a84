"""Every table the ``lambdaml`` command prints fits 80 columns whole: no column dropped, no header or
figure cut to ``…``. Each table is built by the function the command prints it with, from wide but
realistic figures (hours-long runs, thousands of workers, terabytes sent, costs from a millionth of
a dollar to thousands)."""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from analytic_model import Workload, advise
from analytic_model.advisor import Advice
from analytic_model.prediction import Prediction
from lambdaml import cli
from lambdaml.cli.compare import comparison_tables
from lambdaml.cli.output import advice_table, profile_table, result_table, size, status_table
from lambdaml.runtime.reports import JobResult

WIDTH = 80


def render(table: Table) -> str:
    console = Console(width=WIDTH, record=True, file=io.StringIO(), highlight=False, markup=False, emoji=False)
    console.print(table)
    return console.export_text()


def assert_fits(table: Table) -> str:
    """Every header on one line, every row on one line with each of its cells whole, nothing cut."""
    text = render(table)
    lines = text.splitlines()
    assert "…" not in text, text
    assert all(len(line) <= WIDTH for line in lines), text
    headers = [str(c.header) for c in table.columns if str(c.header)]

    def on_one_line(cells: list[str]) -> bool:
        pattern = re.compile(".*".join(re.escape(c) for c in cells))
        return any(pattern.search(line) for line in lines)

    assert on_one_line(headers), (headers, text)
    rows = list(zip(*(list(map(str, c.cells)) for c in table.columns), strict=True))
    assert rows, "a table with no rows proves nothing"
    for row in rows:
        assert on_one_line([c for c in row if c]), (row, text)
    return text


# --- train's result --------------------------------------------------------------------------


def worker(rank: int, scale: float) -> dict[str, Any]:
    return {
        "rank": rank,
        "rows": 8000,
        "load_s": 1234.5 * scale,
        "compute_s": 36_000.0 * scale,
        "communicate_s": 0.0004,
        "wait_s": 119.96,
        "total_s": 3.6e6 * scale,
        "channel": {
            "requests": 123_456_789.0 * scale,
            "bytes_sent": 987.6e12 * scale,
            "bytes_received": 9e12,
            "rounds": 40_000,
            "bytes_sent_per_round": 999.96 * scale * 1e6,
            "bytes_received_per_round": 1.0,
            "requests_per_round": 7.2,
        },
    }


def job_result(*, backend: str = "lambda", channel: str = "memcached", workers: int = 1000, **change: Any) -> JobResult:
    data: dict[str, Any] = {
        "job_id": "higgs-lr-20261201-110414-afdd",
        "backend": backend,
        "started_at": "2026-12-01T11:04:14+00:00",
        "finished_at": "2026-12-01T21:05:13+00:00",
        "wall_time_s": 36_059.9,
        "spec": {"name": "higgs-lr", "workers": workers, "channel": {"kind": channel}},
        "dataset": {"name": "higgs", "train_rows": 11_000_000, "test_rows": 1_000_000},
        "model_uri": "s3://lambdaml-data/jobs/higgs-lr-20261201-110414-afdd/model",
        "ranks_agree": True,
        "loss_curve": [{"epoch": e, "loss": 0.7 / e, "elapsed_s": 3600.0 * e} for e in range(1, 11)],
        "test_accuracy": 0.7312,
        "test_loss": 0.5467,
        "workers": [worker(r, 1.0 if r % 2 else 1e-6) for r in range(workers)],
        "cost": {"total_dollars": 12_345.678},
    }
    data.update(change)
    return JobResult.from_json(copy.deepcopy(data))


def test_the_result_table_fits() -> None:
    text = assert_fits(result_table(job_result()))
    assert "987.6TB" in text and "41.7d" in text and "123456789" in text  # the widest figures, whole


def test_sizes_and_times_stay_short() -> None:
    from analytic_model.advisor import format_money, format_time

    assert [size(b) for b in (0, 304, 999.4, 999.96, 121_625, 1.2e9, 987.6e12, 5e15)] == [
        "0B", "304B", "999B", "1.0KB", "121.6KB", "1.2GB", "987.6TB", "5000.0TB",
    ]  # fmt: skip
    assert [format_time(s) for s in (0.0004, 0.523, 12.34, 119.96, 618.0, 9000.0, 7.16e6)] == [
        "0ms", "523ms", "12.3s", "120.0s", "10.3m", "2.5h", "82.9d",
    ]  # fmt: skip
    assert [format_money(d) for d in (0.0000123, 0.0286, 12.345, 1_257_113.4)] == [
        "$0.000012", "$0.0286", "$12.35", "$1,257,113",
    ]  # fmt: skip


# --- compare ----------------------------------------------------------------------------------


def test_the_comparison_tables_fit() -> None:
    results = [
        job_result(),
        job_result(backend="iaas-local", channel="s3", workers=64, wall_time_s=0.9),
        job_result(backend="lambda", channel="dynamodb", workers=1000, cost={"total_dollars": 0.0000123}),
    ]
    texts = [assert_fits(table) for table in comparison_tables(results)]
    assert len(texts) == 2
    assert all("lambda memcached W=1000" in t and "iaas-local gloo W=64" in t for t in texts)
    assert "$0.000012" in texts[1] and "$12,346" in texts[1]


# --- calibrate's profile ----------------------------------------------------------------------


def test_the_profile_table_fits() -> None:
    slow = {
        "latency_put_s": 1.23456,
        "latency_get_s": 0.98765,
        "bandwidth_put_Bps": 12.3e9,
        "bandwidth_get_Bps": 99.9e9,
        "server_get_s": 0.5,
    }
    measured = {"target": "stack:lambdaml-production-eu", "channels": {k: slow for k in ("memcached", "dynamodb")}}
    assert "1234.56" in assert_fits(profile_table(measured))


# --- advise -----------------------------------------------------------------------------------


def prediction(platform: str, workers: int, option: str, *, seconds: float, cost: float, **more: Any) -> Prediction:
    parts = {"startup_s": seconds / 10, "load_s": seconds / 10, "compute_s": seconds / 2, "communicate_s": seconds / 4}
    return Prediction(platform, workers, seconds, cost, option, time=parts, **more)


def test_the_advice_table_fits_with_the_widest_configurations() -> None:
    workload = Workload(model="resnet50", dataset_bytes=1.5e12, samples=1_281_167, epochs=90)
    rows = [
        prediction("faas", 1000, "memcached", pattern="scatter_reduce", memory_mb=10240, seconds=3.5e6, cost=98_765.43),
        prediction("faas", 1, "s3", pattern="allreduce", memory_mb=10240, seconds=0.0004, cost=0.0000012),
        prediction("iaas", 1000, "g4dn.2xlarge", seconds=7199.0, cost=12_345.67),
        prediction("faas", 200, "dynamodb", pattern="allreduce", memory_mb=1769, seconds=119.96, cost=0.5),
    ]
    advice = Advice(workload, "eu-west-1", "stack:lambdaml-production-eu", rows, [])
    for every in (True, False):
        text = assert_fits(advice_table(advice, every=every))
        assert "FaaS 1000 memcached SR 10240MB" in text and "IaaS 1000 g4dn.2xlarge" in text
        assert "$98,765" in text


def test_the_advice_table_fits_for_a_real_prediction() -> None:
    workload = Workload(model="lr", dataset_bytes=8e9, samples=11_000_000, features=28, epochs=100)
    advice = advise(workload, None, workers=[1, 10, 100, 1000], memory_mb=[1769, 10240])
    assert_fits(advice_table(advice, every=True))
    assert_fits(advice_table(advice, every=False))


# --- status -----------------------------------------------------------------------------------


def test_the_status_table_fits() -> None:
    beats = [{"rank": r, "epoch": 999, "loss": 1_234_567.0 / (r + 1), "invocation": 12} for r in range(1000)]
    assert "1234567.00000" in assert_fits(status_table({"epochs": 1000, "heartbeats": beats}))


# --- through the command itself: its console is 80 columns wide when not a terminal --------


@pytest.mark.parametrize("output", ["table", "json"])
def test_compare_through_the_command(tmp_path: Path, output: str, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for i, result in enumerate([job_result(workers=8), job_result(backend="local", channel="redis", workers=8)]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(result.to_json()))
    assert cli.main(["compare", *map(str, paths), "--output", output]) == 0
    out = capsys.readouterr().out
    if output == "json":
        runs = json.loads(out)["runs"]
        assert [r["label"] for r in runs] == ["lambda memcached W=8 afdd", "local redis W=8 afdd"]
        assert runs[1]["wall_ratio"] == 1.0 and runs[0]["dollars"] == 12_345.678
    else:
        assert "…" not in out and max(map(len, out.splitlines())) <= WIDTH, out
        assert "local redis W=8 afdd" in out


def test_the_jobs_table_fits() -> None:
    from lambdaml.cli.output import jobs_table

    summary = {"state": "interrupted", "attempt": 999, "created_at": 1.8e9, "duration_s": 216_000.0}
    rows = [
        {**summary, "job_id": f"mobilenet-cifar-20261201-123951-3b0{i}", "cost_dollars": 12_345.6} for i in range(9)
    ]
    assert "$12,346" in assert_fits(jobs_table(rows, now=1.8e9 + 86_399_000))


def test_the_datasets_table_fits() -> None:
    from lambdaml.cli.output import datasets_table

    big = {"versions": 2, "train_rows": 8_800_000_000, "test_rows": 2_200_000_000, "shards": 10_000, "bytes": 9e14}
    rows = [{**big, "name": f"higgs-full-libsvm-sparse-{i}"} for i in range(3)]
    unreadable = {**dict.fromkeys(big), "versions": 1, "name": "broken"}
    assert "8,800,000,000" in assert_fits(datasets_table([*rows, unreadable]))
