"""Worker reports and job results: typed records that keep their files' JSON shape exactly."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lambdaml.cost import Invocation
from lambdaml.errors import CodecError
from lambdaml.runtime.reports import Continuation, JobResult, Traffic, WorkerReport

TIMES = {"load_s": 0.68, "compute_s": 0.16, "communicate_s": 28.7, "wait_s": 22.1, "total_s": 54.0}
CHANNEL = {
    "puts": 401.0,
    "gets": 2072.0,
    "lists": 1.0,
    "deletes": 400.0,
    "requests": 2874.0,
    "bytes_sent": 121625.0,
    "bytes_received": 364900.0,
    "wait_s": 22.1,
    "rounds": 400,
    "bytes_sent_per_round": 304.0625,
    "bytes_received_per_round": 912.25,
    "requests_per_round": 7.185,
}
ASYNC = {"version": 12, "pushes": 6, "applied": 12, "staleness_mean": 0.5, "staleness_max": 2, "ssp_wait_s": 0.0}
MEMORY = {"peak_rss_after_first_epoch_mb": 108.5, "peak_rss_mb": 108.9}
BILLED = [
    {"duration_s": 12.5, "memory_mb": 2048, "cold": True, "architecture": "x86_64"},
    {"duration_s": 3.0, "memory_mb": 2048, "cold": False, "architecture": "arm64"},
]

# Rank 0's report as the worker wrote it before reports were typed (an SVM: labels -1/+1, no majority).
LEAD_REPORT: dict[str, Any] = {
    "rank": 0,
    "status": "done",
    "losses": [0.31, 0.25],
    "epoch_elapsed_s": [12.9, 23.7],
    "model_checksum": "0a1b2c3d",
    "rows": 8000,
    "steps_per_epoch": 80,
    "invocations": 2,
    "memory": MEMORY,
    "async": ASYNC,
    "model_uri": "s3://data/jobs/j/model",
    "test_loss": 0.245,
    "test_accuracy": 0.8925,
    "classes": 2,
    "majority_accuracy": None,
    "times": TIMES,
    "channel": CHANNEL,
    "billed": BILLED,
}

# A result as earlier versions wrote it: a Lambda job (invocations per rank) and a torch.distributed rank.
RESULT: dict[str, Any] = {
    "job_id": "higgs-lr-1",
    "attempt": 2,
    "status": "succeeded",
    "backend": "lambda",
    "started_at": "2026-12-01T11:04:14+00:00",
    "finished_at": "2026-12-01T11:05:13+00:00",
    "wall_time_s": 58.9,
    "spec": {"name": "higgs-lr", "workers": 2, "channel": {"kind": "s3", "bucket": "comm"}},
    "dataset": {
        "name": "higgs",
        "version": "20261201T110413-afdd87",
        "train_rows": 32000,
        "test_rows": 8000,
        "classes": 2,
    },
    "model_uri": "s3://data/jobs/higgs-lr-1/model",
    "ranks_agree": True,
    "loss_curve": [{"epoch": 1, "loss": 0.31, "elapsed_s": 12.9}, {"epoch": 2, "loss": 0.25, "elapsed_s": 23.7}],
    "test_accuracy": None,
    "classes": None,
    "majority_accuracy": None,
    "test_loss": 0.245,
    "workers": [
        {
            "rank": 0,
            "rows": 8000,
            **TIMES,
            "channel": CHANNEL,
            "async": ASYNC,
            "billed": BILLED,
            "epoch_elapsed_s": [12.9, 23.7],
            "memory": MEMORY,
        },
        {"rank": 1, "rows": 8000, **TIMES, "channel": {"requests": 400.0, "bytes_sent": 9e5, "bytes_received": 9e5}},
    ],
    "cost": {"region": "us-east-1", "lambda": {"invocations": 3}, "total_dollars": 0.0286},
    "invocations": [2, 1],
}


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (WorkerReport, LEAD_REPORT),
        (WorkerReport, {k: v for k, v in LEAD_REPORT.items() if k not in ("async", "billed", "model_uri")}),
        (
            WorkerReport,
            {k: v for k, v in LEAD_REPORT.items() if k not in ("test_accuracy", "classes", "majority_accuracy")},
        ),
        (Continuation, {"rank": 3, "status": "continued", "epoch": 1, "step": 40}),
        (JobResult, RESULT),
    ],
    ids=["lead-report", "report", "unsupervised-report", "continuation", "result"],
)
def test_a_record_reads_and_writes_its_file_exactly(cls: Any, data: dict[str, Any]) -> None:
    record = cls.from_json(copy.deepcopy(data))
    assert json.dumps(record.to_json()) == json.dumps(data)  # the same keys, nesting, order and values
    assert cls.from_json(record.to_json()) == record


def test_the_parts_are_typed() -> None:
    report = WorkerReport.from_json(LEAD_REPORT)
    assert report.losses == (0.31, 0.25) and report.times.communicate_s == 28.7
    assert report.channel.per_round is not None and report.channel.per_round.rounds == 400
    assert report.async_stats is not None and report.async_stats.applied == 12
    assert report.accuracy is not None and report.accuracy.majority_accuracy is None
    assert report.billed == (Invocation(12.5, 2048, cold=True), Invocation(3.0, 2048, cold=False, architecture="arm64"))
    gloo = JobResult.from_json(RESULT).workers[1].channel
    assert gloo == Traffic(requests=400.0, bytes_sent=9e5, bytes_received=9e5) and gloo.puts is None


def test_a_result_from_before_attempts_and_dataset_versions_still_reads() -> None:
    old = {k: v for k, v in RESULT.items() if k not in ("attempt", "backend", "classes", "majority_accuracy")}
    old["dataset"] = {"name": "higgs", "train_rows": 32000, "test_rows": 8000}
    channel = {**CHANNEL, "counters": 3.0}  # a figure channels no longer count
    billed = [{"duration_s": 12.5, "memory_mb": 2048}]  # before cold starts were counted
    old["workers"] = [{"rank": 0, "rows": 8000, **TIMES, "channel": channel, "billed": billed}]
    result = JobResult.from_json(old)
    assert (result.attempt, result.backend, result.classes, result.dataset.version) == (1, "lambda", None, None)
    assert result.workers[0].billed == (Invocation(12.5, 2048, cold=False),)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("workers"), "r.json: workers is missing"),
        (lambda r: r["workers"][1].update(load_s="fast"), "r.json: workers[1].load_s must be a number, got 'fast'"),
        (lambda r: r["workers"][0]["channel"].pop("requests"), "r.json: workers[0].channel.requests is missing"),
        (lambda r: r["loss_curve"][0].update(epoch=1.5), "r.json: loss_curve[0].epoch must be a whole number, got 1.5"),
        (lambda r: r.update(ranks_agree=1), "r.json: ranks_agree must be true or false, got 1"),
        (lambda r: r.update(loss_curve={"epoch": 1}), "r.json: loss_curve must be a list, got {'epoch': 1}"),
        (lambda r: r.update(dataset=None), "r.json: dataset must be an object, got None"),
        (lambda r: r.update(cost=[1]), "r.json: cost must be an object, got [1]"),
        (lambda r: r.update(wall_time_s=10**400), "r.json: wall_time_s must be a number, got an integer of 1329 bits"),
    ],
)
def test_a_malformed_result_is_refused_in_one_line(change: Any, message: str) -> None:
    result = copy.deepcopy(RESULT)
    change(result)
    with pytest.raises(CodecError) as refused:
        JobResult.from_json(result, "r.json")
    assert str(refused.value) == message


def test_a_report_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(CodecError, match=r"^p00001.json: the record must be an object, got \[1, 2\]$"):
        WorkerReport.from_json([1, 2], "p00001.json")
