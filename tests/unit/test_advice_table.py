"""The advisor's table says what it means: rows of the same figures are one row naming every
channel (and no "too close to call" between them), every star is explained by the figures shown
(or by a line), and checkpoints are never counted as communication."""

from __future__ import annotations

import re
from typing import Any

import pytest

from analytic_model import Workload, advise
from analytic_model.advisor import Advice, merge_same
from analytic_model.prediction import Prediction
from analytic_model.shard_size import binary_dataset_bytes
from analytic_model.uncertainty import Uncertainty
from lambdaml import cli
from tests.unit.test_tables_fit import assert_fits, render

HIGGS = Workload("lr", dataset_bytes=binary_dataset_bytes(11_000_000, 28), samples=11_000_000, features=28,
                 algorithm="admm", batch_size=10_000, epochs=10)  # fmt: skip
#: README's advise command.
README_ARGV = ["advise", "--model", "lr", "--features", "28", "--samples", "11e6", "--algorithm", "admm",
               "--batch-size", "10000", "--epochs", "10", "--workers", "10,20", "--memory", "3008",
               "--instances", "c5.large,c5.xlarge"]  # fmt: skip


def row(option: str, workers: int, seconds: float, cost: float, **parts: Any) -> Prediction:
    time = {"startup_s": 1.0, "load_s": 1.0, "compute_s": seconds - 2.5, "communicate_s": 0.5, **parts}
    return Prediction("faas", workers, seconds, cost, option, pattern="allreduce", memory_mb=3008, time=time,
                      uncertainty=Uncertainty(0.3, 0.3))  # fmt: skip


def lines_of(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


def test_rows_of_the_same_figures_are_one_row_naming_both_channels(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(README_ARGV) == 0
    out = capsys.readouterr().out
    assert len(lines_of(out, r"FaaS +20 redis\|memcached AR 3008MB ")) == 1, out
    assert not lines_of(out, r"FaaS +20 (redis|memcached) AR"), out  # neither alone
    # The recommendation is one choice, not a tie between two names for it.
    advice = advise(HIGGS, workers=[10, 20], memory_mb=[3008], instances=["c5.large", "c5.xlarge"])
    close = advice.too_close_to_call
    assert close is None or {close[0].option, close[1].option} != {"redis", "memcached"}
    assert "redis|memcached" in advice.recommendation
    assert "(redis, allreduce" not in advice.recommendation and "(memcached, allreduce" not in advice.recommendation


def test_merging_keeps_rows_that_differ_and_the_json_keeps_every_row() -> None:
    redis, memcached = row("redis", 10, 3.0, 0.0020), row("memcached", 10, 3.0001, 0.0020001)
    s3 = row("s3", 10, 3.0, 0.0020 * 1.01)  # 1% dearer: another row
    other_w = row("dynamodb", 20, 3.0, 0.0020)  # the same figures at another W: another row
    merged = merge_same([memcached, s3, redis, other_w])
    assert sorted(p.option for p in merged) == ["dynamodb", "redis|memcached", "s3"]
    close = Advice(HIGGS, "us-east-1", "aws", [redis, memcached, row("s3", 10, 9.0, 0.009)])
    assert close.too_close_to_call is None  # the only other option is far off
    assert close.recommendation.startswith("recommended: FaaS 10 x Lambda (redis|memcached, allreduce, 3008 MB)")
    data = close.to_dict()
    assert [(r["option"], r["pareto"]) for r in data["rows"]] == [("redis", True), ("memcached", True), ("s3", False)]


def test_starred_rows_show_the_digits_that_set_them_apart() -> None:
    # Three front rows all 55.2s to one decimal: each faster and dearer than the next.
    rows = [row("s3", 10, 55.21, 0.0300), row("s3", 20, 55.23, 0.0290), row("s3", 50, 55.24, 0.0280)]
    advice = Advice(HIGGS, "us-east-1", "aws", rows)
    assert len(advice.pareto) == 3
    text = assert_fits(_table(advice))
    assert [line.split()[-5] for line in lines_of(text, r"^\*")] == ["55.21s", "55.23s", "55.24s"], text
    # Costs that read alike get their digits too; rows off the front keep the usual ones.
    rows = [row("s3", 10, 40.0, 0.03001), row("s3", 20, 50.0, 0.03000), row("redis", 5, 60.0, 0.03002)]
    text = assert_fits(_table(Advice(HIGGS, "us-east-1", "aws", rows)))
    assert [line.split()[-4] for line in lines_of(text, r"FaaS")] == ["$0.03001", "$0.03000", "$0.0300"], text


def test_a_line_says_what_sets_apart_starred_rows_that_digits_cannot(capsys: pytest.CaptureFixture[str]) -> None:
    from lambdaml.cli.output import _print_advice

    alike = [row("s3", 10, 55.2000001, 0.0300), row("s3", 20, 55.2000002, 0.0290)]
    _print_advice(Advice(HIGGS, "us-east-1", "aws", alike), every=True)
    out = capsys.readouterr().out
    assert "* rows that read alike: the upper is faster, the lower cheaper" in out
    assert [line.split()[-5] for line in lines_of(out, r"^\* FaaS")] == ["55.2s", "55.2s"]  # no digits for nothing
    apart = [row("s3", 10, 50.0, 0.0300), row("s3", 20, 60.0, 0.0290)]
    _print_advice(Advice(HIGGS, "us-east-1", "aws", apart), every=True)
    assert "read alike" not in capsys.readouterr().out


def test_checkpoints_are_not_communication() -> None:
    # One worker, no channel, 11 minutes of checkpoints: start-up, not comm.
    single = Prediction("faas", 1, 700.0, 0.05, "s3", pattern="allreduce", memory_mb=3008,
                        time={"startup_s": 1.0, "load_s": 9.0, "compute_s": 30.0, "communicate_s": 0.0,
                              "checkpoint_s": 650.0, "heartbeat_s": 4.0, "continuation_s": 6.0})  # fmt: skip
    text = assert_fits(_table(Advice(HIGGS, "us-east-1", "aws", [single])))
    line = lines_of(text, r"FaaS")[0]
    # time, cost, start (all but computing and communicating), compute, comm
    assert line.split()[-5:] == ["11.7m", "$0.0500", "11.2m", "30.0s", "0ms"], text
    assert lines_of(text, r"start +compute +comm$")


def test_a_merged_row_of_the_widest_configuration_fits() -> None:
    wide = {"pattern": "scatter_reduce_2d", "memory_mb": 10240}
    parts = {"startup_s": 3000.0, "load_s": 3000.0, "compute_s": 1.7e6, "communicate_s": 1.7e6}
    rows = [
        Prediction("faas", 1000, 3.5e6, 98_765.43, "redis|memcached", time=parts, **wide),  # type: ignore[arg-type]
        Prediction("faas", 1000, 3.4e6, 0.0000123, "dynamodb", time=parts, **wide),  # type: ignore[arg-type]
    ]
    for every in (True, False):
        text = assert_fits(_table(Advice(HIGGS, "us-east-1", "aws", rows), every=every))
        assert "FaaS 1000 redis|memcached SR2D 10240MB" in text


def test_the_real_table_merges_and_fits() -> None:
    advice = advise(HIGGS)  # the default sweep: 1-50 workers, three sizes, every instance type
    assert any("|" in p.option for p in advice.distinct)
    for every in (True, False):
        text = render(_table(advice, every=every))
        assert "…" not in text and max(map(len, text.splitlines())) <= 80, text


def _table(advice: Advice, *, every: bool = True) -> Any:
    from lambdaml.cli.output import advice_table

    return advice_table(advice, every=every)
