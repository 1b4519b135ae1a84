"""``lambdaml advise`` through the CLI's entry point: the table, the JSON, the plot and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytic_model.profile import save_profile
from analytic_model.shard_size import binary_dataset_bytes
from lambdaml.cli import main

LR = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "1.2GB", "--samples", "11e6"]
SMALL = ["--workers", "2,10", "--memory", "3008", "--instances", "c5.large,g4dn.xlarge"]


def test_advise_prints_a_table_and_one_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LR, "--algorithm", "admm", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "lr with admm: 11,000,000 samples, 1.2 GB, 10 epochs" in out
    assert "IaaS  10 c5.large" in out and "FaaS  10 s3 " in out and "FaaS   2 dynamodb " in out
    assert out.count("recommended: ") + out.count("too close to call: ") == 1
    assert any(line.lstrip().startswith("*") for line in out.splitlines())  # Pareto rows are marked


def test_advise_json_is_valid_and_complete(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LR, *SMALL, "--channels", "s3,redis", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # W=2: 2 channels x 2 patterns (its grid is 1 x 2: the 2-D pattern is ScatterReduce), and 2
    # instance types; W=10: 2 channels x 3 patterns, and 2 instance types.
    configurations = (2 * 2 + 2) + (2 * 3 + 2)
    assert len(data["rows"]) == configurations
    assert data["recommended"] in data["pareto"]
    assert {r["platform"] for r in data["rows"]} == {"faas", "iaas"}
    assert all(r["time_s"] > 0 and r["cost"] > 0 for r in data["rows"])
    assert data["prices_checked"] and data["workload"]["samples"] == 11_000_000


def test_advise_takes_compression_and_protocol_for_any_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LR, *SMALL, "--channels", "s3,redis", "--compression", "onebit", "--json"]) == 0
    compressed = json.loads(capsys.readouterr().out)
    assert compressed["workload"]["compression"] == "onebit"
    assert all(r["pattern"] != "scatter_reduce_2d" for r in compressed["rows"])  # compression runs without it
    assert any("scatter_reduce_2d" in s for s in compressed["skipped"])
    assert main([*LR, *SMALL, "--channels", "s3", "--algorithm", "choco_sgd", "--compression", "qsgd", "--json"]) == 0
    ring = json.loads(capsys.readouterr().out)
    assert {r["platform"] for r in ring["rows"]} == {"faas"}  # the iaas backends do not run ring methods
    assert any("IaaS 2 x c5.large: the iaas backends run BSP collectives over gloo only" in s for s in ring["skipped"])
    assert main([*LR, *SMALL, "--channels", "redis", "--protocol", "asp", "--json"]) == 0
    asp = json.loads(capsys.readouterr().out)
    assert sorted(r["staleness"] for r in asp["rows"]) == [1.0, 9.0]  # one row per W: the pattern does not matter


def test_advise_writes_the_cost_against_time_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "advice.png"
    assert main([*LR, *SMALL, "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {plot}" in capsys.readouterr().out


def test_advise_takes_the_epochs_to_a_target_from_a_measured_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "result.json"
    curve = [{"epoch": e, "loss": loss, "elapsed_s": e} for e, loss in enumerate([0.69, 0.65, 0.63, 0.62], 1)]
    from tests.unit.test_tables_fit import job_result

    result.write_text(json.dumps(job_result(workers=2, loss_curve=curve).to_json()))
    assert main([*LR, *SMALL, "--from-result", str(result), "--target-loss", "0.63", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["epochs"] == 3


def test_advise_reads_a_profile_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    save_profile({"target": "local", "faas": {"shared_cores": 2}}, tmp_path / "profiles" / "bench.json")
    assert main([*LR, *SMALL, "--profile", "bench", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"] == "local"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dataset-bytes", "-5"], "error: --dataset-bytes must be positive, got '-5'"),
        (["--samples", "-3"], "error: --samples must be positive, got '-3'"),
        (
            ["--channels", "kafka"],
            "error: lambdaml advise: argument --channels: unknown channel 'kafka'; known: s3, redis, memcached, ",
        ),
        (["--instances", "x9.huge"], "error: unknown instance type 'x9.huge'; known: c5.2xlarge"),
        (
            ["--model", "gpt"],
            "error: unknown model 'gpt'; known: kmeans, lr, mlp, mobilenet, multiclass_svm, resnet18, resnet50, ",
        ),
        (["--profile", "/no/such/profile.json"], "error: profile file '/no/such/profile.json' not found"),
        (["--from-result", "r.json"], "error: --from-result needs --target-loss"),
        (["--workers", "2,x"], "error: --workers must be a whole number, got 'x'"),
        (["--patterns", "ring"], "error: lambdaml advise: argument --patterns: unknown pattern 'ring'; known: "),
        (["--patterns", ","], "error: lambdaml advise: argument --patterns: names nothing"),
        (["--algorithm", "sgd"], "error: lambdaml advise: argument --algorithm: invalid choice: 'sgd'"),
        (["--algorithm", "dpsgd", "--compression", "onebit"], "error: algorithm 'dpsgd' does not compress what it"),
        (["--algorithm", "admm", "--protocol", "asp"], "error: algorithm 'admm' runs only under protocol 'bsp'"),
        (["--compression", "topk", "--ratio", "2"], "error: ratio must be in (0, 1], got 2.0"),
        (["--staleness", "x"], "error: --staleness must be a whole number, got 'x'"),
        (
            ["--protocol", "ssp", "--staleness", "-1"],
            "error: --staleness must be a whole number of at least 0, got '-1'",
        ),
        (["--region", "mars-1"], "error: no prices for region 'mars-1'"),
    ],
)
def test_bad_arguments_end_in_one_line(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LR, *SMALL, *extra]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.out == ""


BARE = ["advise", "--workers", "2", "--memory", "3008", "--instances", "c5.large"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--samples", "1e6"], "error: lambdaml advise: --model is required (or --job JOB.yaml"),
        (["--model", "lr", "--samples", "1e6"], "error: give --features (float32 values a row) or --dataset-bytes"),
        (["--model", "lr", "--samples", "1e6", "--features", "28", "--sparse"], "error: --nnz and --density go with"),
        (["--model", "lr", "--samples", "1e6", "--features", "28", "--nnz", "9"], "error: --nnz and --density go with"),
        (["--model", "lr", "--samples", "1e3", "--features", "8", "--sparse", "--density", "2"], "error: --density is"),
        (["--model", "lr", "--samples", "1e3", "--features", "8", "--sparse", "--nnz", "1e9"], "error: nnz must be"),
        (["--model", "lr", "--samples", "1e3", "--dataset-bytes", "1e6", "--nnz", "5"], "error: --nnz and --density"),
        (["--model", "lr", "--samples", "1e3", "--features", "8", "--classes", "10"], "error: model 'lr' is binary"),
    ],
)
def test_sizing_the_data_wrongly_ends_in_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BARE, *extra]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(message), captured.err
    assert captured.err.count("\n") == 1 and captured.out == ""


SPARSE = ["--model", "lr", "--features", "47236", "--sparse"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--model", "lr", "--features", "28"], binary_dataset_bytes(11_000_000, 28)),
        ([*SPARSE, "--nnz", "8e7"], binary_dataset_bytes(11_000_000, 47236, nnz=80_000_000)),
        ([*SPARSE, "--density", "1e-4"], binary_dataset_bytes(11_000_000, 47236, nnz=51_959_600)),
        (["--model", "resnet50", "--dataset-bytes", "1.5GB"], 1.5e9),
    ],
)
def test_the_dataset_bytes_are_the_binary_shards_unless_given(
    extra: list[str], expected: float, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*BARE, "--samples", "11e6", *extra, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"]["dataset_bytes"] == expected


def test_softmax_is_sized_by_its_classes(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main([*BARE, "--model", "softmax", "--samples", "6e4", "--features", "784", "--classes", "10", "--json"]) == 0
    )
    row = json.loads(capsys.readouterr().out)["rows"][0]
    # One round's vector: (784 + 1) x 10 float64 weights and the loss statistics, on the wire.
    assert row["requests"]["bytes_sent"] > 785 * 10 * 8
