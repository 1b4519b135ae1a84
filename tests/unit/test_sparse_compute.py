"""Sparse linear models are priced from their rows' non-zeros, not from their width."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from analytic_model import Workload, aws_profile, load_profile
from analytic_model.calibration import ComputeCalibration
from analytic_model.compute import compute_rates
from analytic_model.prediction import predict_faas
from analytic_model.profile import SparseCompute, save_profile
from analytic_model.shard_size import binary_dataset_bytes, nnz_of_shards
from lambdaml.channels.memory import MemoryChannel
from lambdaml.cli import main
from lambdaml.data import shards, synthetic
from lambdaml.errors import ConfigError
from tests.unit.test_analytic_profile import _calibration

RCV1 = 47_236
ROWS = 700_000


def rcv1(density: float, model: str = "lr", **fields: object) -> Workload:
    nnz = round(density * ROWS * RCV1)
    dataset = binary_dataset_bytes(ROWS, RCV1, nnz=nnz)
    return Workload(model, dataset_bytes=dataset, samples=ROWS, features=RCV1, sparse=True, epochs=1, **fields)  # type: ignore[arg-type]


def compute_s(workload: Workload) -> float:
    return float(predict_faas(workload, 1, "s3", "allreduce", 1769, aws_profile()).time["compute_s"])


def test_the_rcv1_step_is_priced_from_its_non_zeros_and_grows_with_the_density() -> None:
    times = [compute_s(rcv1(d)) for d in (0.0015, 0.01, 0.05)]
    assert times[0] < times[1] < times[2]
    # LambdaML's own CSR step at 0.15%, batch 100, took 0.26 ms on one core (the shipped rates'
    # machine); flops x features priced it at 12.7 ms.
    assert 0.18e-3 < times[0] / 7000 < 0.35e-3
    # Most of a step at 5% is its non-zeros: about 33 times those at 0.15%.
    assert 5 < times[2] / times[0] < 33


def test_the_non_zeros_come_from_the_shards_bytes_unless_given() -> None:
    given = replace(rcv1(0.0015), nnz_per_row=0.0015 * RCV1)
    assert rcv1(0.0015).row_nonzeros(aws_profile().model("lr")) == pytest.approx(0.0015 * RCV1, rel=1e-6)
    assert compute_s(rcv1(0.0015)) == pytest.approx(compute_s(given), rel=1e-6)


def test_a_wider_model_costs_more_a_step_but_not_a_row() -> None:
    profile, info = aws_profile(), aws_profile().model("lr")
    narrow = compute_rates(replace(rcv1(0.0015), nnz_per_row=70.0), info, profile)
    wide = compute_rates(replace(rcv1(0.0015), features=10 * RCV1, nnz_per_row=70.0), info, profile)
    assert wide.per_sample_s == narrow.per_sample_s and wide.per_step_s > narrow.per_step_s
    sparse = profile.compute.sparse
    assert sparse is not None
    assert wide.per_step_s - narrow.per_step_s == pytest.approx(sparse.per_param_step_s * 9 * RCV1)


def test_a_multiclass_row_touches_a_weight_per_class() -> None:
    profile = aws_profile()
    lr = compute_rates(rcv1(0.0015), profile.model("lr"), profile)
    softmax = compute_rates(rcv1(0.0015, "softmax", classes=10), profile.model("softmax"), profile)
    assert softmax.per_sample_s == pytest.approx(10 * lr.per_sample_s)


@pytest.mark.parametrize(
    "workload, message",
    [
        (Workload("kmeans", 1e6, 1000, features=50, sparse=True, algorithm="kmeans"), "needs dense features"),
        (Workload("lr", 1e3, 1000, features=50, sparse=True), "hold no non-zeros in 1000 CSR rows"),
        (Workload("lr", 1e6, 1000, features=50, sparse=True, nnz_per_row=60), "must be in (0, 50]"),
    ],
)
def test_sparse_workloads_that_cannot_be_are_one_line_errors(workload: Workload, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        workload.check(aws_profile())
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_calibrated_sparse_rate_prices_sparse_work(tmp_path: Path) -> None:
    base = _calibration()
    rates = SparseCompute(per_nonzero_s=2e-8, per_row_s=0.0, per_param_step_s=0.0, per_step_s=0.0)
    compute = ComputeCalibration(base.compute.measured, base.compute.add_Bps, sparse=rates)
    profile = load_profile(save_profile(replace(base, compute=compute), tmp_path / "local.json"))
    assert profile.compute.sparse == rates
    assert "measured" in profile.origin["compute.sparse.per_nonzero_s"]
    workload = replace(rcv1(0.0015), nnz_per_row=50.0)
    assert compute_rates(workload, profile.model("lr"), profile).per_sample_s == pytest.approx(1e-6)
    older = load_profile(save_profile(base, tmp_path / "older.json"))  # a calibration before sparse rates
    assert older.compute.sparse == aws_profile().compute.sparse


def test_the_shards_bytes_give_their_non_zeros() -> None:
    X, y, _ = synthetic.rcv1_like(3000, features=5000, nnz_per_row=30, seed=2)
    manifest = shards.prepare(MemoryChannel(), "nnz", X, y, shards=3, test_fraction=0.0)
    counted = sum(map(nnz_of_shards, manifest.shard_bytes, manifest.shard_rows, [5000] * 3))
    assert abs(counted - X.nnz) <= 3  # an odd count pads each of two arrays by 4 bytes


def test_advise_prices_the_density_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", "--model", "lr", "--samples", "7e4", "--features", "47236", "--sparse", "--workers", "1"]
    argv += ["--memory", "10240", "--channels", "s3", "--instances", "c5.large", "--json"]

    def compute(*extra: str) -> float:
        assert main([*argv, *extra]) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        faas = [r for r in rows if r["platform"] == "faas"]
        assert faas[0]["compute_from"] == "sparse rate"
        return float(faas[0]["time"]["compute_s"])

    low, high = compute("--density", "0.0015"), compute("--density", "0.05")
    assert high > 5 * low
    # Given the shards' bytes, the density still prices the compute.
    assert compute("--density", "0.0015", "--dataset-bytes", "1GB") == pytest.approx(low)
