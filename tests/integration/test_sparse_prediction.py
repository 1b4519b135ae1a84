"""``advise --job`` prices a sparse job's compute from the non-zeros its shards hold.

RCV1-like synthetic data (47,236 features) at 50,000 rows, prepared into moto: the manifest's
shard bytes say how many non-zeros a row has, and a what-if on the density moves the bytes and
the compute. (How close the prediction comes to a measured run is a benchmark's question:
bench/model_accuracy.py, its ``rcv1`` size.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lambdaml.channels import Channel
from lambdaml.cli import main
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic

ROWS = 50_000
FEATURES = synthetic.RCV1_FEATURES
DENSITIES = {"sparser": 20}  # words drawn a row: about 0.04% of the features


@pytest.fixture(scope="module")
def datasets(data_store: tuple[StorageSpec, Channel]) -> dict[str, shards.Manifest]:
    made = {}
    for name, words in DENSITIES.items():
        X, y, _ = synthetic.rcv1_like(ROWS, nnz_per_row=words, seed=3)
        made[name] = shards.prepare(data_store[1], f"rcv1-{name}", X, y, shards=1, test_fraction=0.0)
    return made


def test_advise_job_reads_the_density_from_the_manifest(
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = {
        "name": "sparse-advice",
        "workers": 1,
        "dataset": datasets["sparser"].name,
        "storage": data_store[0].model_dump(mode="json"),
        "channel": {"kind": "redis"},
        "model": {"name": "lr"},
        "algorithm": {"name": "ga_sgd", "batch_size": 100, "epochs": 1},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    argv = ["advise", "--job", str(path), "--memory", "1769", "--instances", "c5.large", "--json"]
    assert main(argv) == 0
    advice = json.loads(capsys.readouterr().out)
    workload = advice["workload"]
    # 20 words drawn a row, a few repeated: the shards hold 19-20 non-zeros a row.
    assert workload["sparse"] is True and 18 < workload["nnz_per_row"] <= 20
    assert all(row["compute_from"] == "sparse rate" for row in advice["rows"] if row["platform"] == "faas")
    # A what-if on the density: the bytes follow it, and so does the compute.
    assert main([*argv, "--density", "0.004"]) == 0
    denser = json.loads(capsys.readouterr().out)
    assert denser["workload"]["nnz_per_row"] == pytest.approx(0.004 * FEATURES)
    assert denser["workload"]["dataset_bytes"] > 5 * workload["dataset_bytes"]
