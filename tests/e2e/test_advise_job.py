"""``lambdaml advise --job`` as a user runs it: the job file and its dataset's manifest size the advice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.data.shards import Manifest
from lambdaml.local.services import free_port
from lambdaml.storage import open_storage
from tests.e2e.test_cli import assert_one_line_error, lambdaml
from tests.helpers import Services, unique_name


@pytest.fixture(scope="module")
def prepared(services: Services) -> tuple[StorageSpec, dict[str, Manifest]]:
    """One bucket with a dense binary dataset, a multiclass one and a sparse one."""
    spec = StorageSpec(bucket=unique_name("advise"), endpoint_url=services.moto_url)
    store = open_storage(spec)
    store.ensure()
    X, y, _ = synthetic.higgs_like(1001, seed=0)
    dense = shards.prepare(store, "dense", X, y, shards=2)
    classes = np.random.default_rng(1).integers(0, 5, size=len(y)).astype(np.float32)
    multi = shards.prepare(store, "multi", X, classes, shards=2)
    S, ys, _ = synthetic.rcv1_like(600, features=3000, nnz_per_row=20, seed=2)
    sparse = shards.prepare(store, "sparse", S, ys, shards=2)
    return spec, {"dense": dense, "multi": multi, "sparse": sparse}


def write_job(tmp_path: Path, storage: StorageSpec, **fields: Any) -> Path:
    job: dict[str, Any] = {
        "name": "adv",
        "workers": 2,
        "dataset": "dense",
        "storage": storage.model_dump(mode="json"),
        "channel": {"kind": "redis"},
        "model": {"name": "lr"},
        "algorithm": {"name": "ga_sgd", "batch_size": 50, "epochs": 3},
        "sync": {"pattern": "allreduce"},
        **fields,
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def advise_json(*args: str) -> dict[str, Any]:
    result = lambdaml("advise", *args, "--output", "json", "--instances", "c5.large")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_manifest_gives_the_rows_features_and_shard_bytes(
    tmp_path: Path, prepared: tuple[StorageSpec, dict[str, Manifest]]
) -> None:
    storage, manifests = prepared
    advice = advise_json("--job", str(write_job(tmp_path, storage)))
    workload, dense = advice["workload"], manifests["dense"]
    assert workload["samples"] == dense.train_rows == 801
    assert workload["features"] == 28
    assert workload["dataset_bytes"] == sum(dense.shard_bytes)
    assert (workload["model"], workload["algorithm"], workload["batch_size"], workload["epochs"]) == (
        "lr",
        "ga_sgd",
        50,
        3,
    )
    faas = [r for r in advice["rows"] if r["platform"] == "faas"]
    # The job's workers, channel and pattern; every memory size, as the file sets none.
    assert {(r["workers"], r["option"], r["pattern"]) for r in faas} == {(2, "redis", "allreduce")}
    assert {r["memory_mb"] for r in faas} == {1769, 3008, 10240}


def test_flags_override_the_job_and_a_what_if_recomputes_the_bytes(
    tmp_path: Path, prepared: tuple[StorageSpec, dict[str, Manifest]]
) -> None:
    storage, _ = prepared
    job = str(write_job(tmp_path, storage, runtime={"memory_mb": 3008}))
    advice = advise_json("--job", job, "--workers", "4", "--channels", "s3", "--samples", "11e6", "--epochs", "1")
    workload = advice["workload"]
    assert workload["samples"] == 11_000_000 and workload["features"] == 28 and workload["epochs"] == 1
    assert workload["dataset_bytes"] == pytest.approx(11_000_000 * 29 * 4, rel=1e-6)  # not the manifest's
    faas = [r for r in advice["rows"] if r["platform"] == "faas"]
    assert {(r["workers"], r["option"], r["memory_mb"]) for r in faas} == {(4, "s3", 3008)}


def test_a_multiclass_dataset_sizes_softmax_and_is_refused_by_a_binary_model(
    tmp_path: Path, prepared: tuple[StorageSpec, dict[str, Manifest]]
) -> None:
    storage, _ = prepared
    job = write_job(tmp_path, storage, dataset="multi", model={"name": "softmax"})
    workload = advise_json("--job", str(job))["workload"]
    assert (workload["model"], workload["classes"], workload["features"]) == ("softmax", 5, 28)
    binary = write_job(tmp_path, storage, dataset="multi")
    assert_one_line_error(lambdaml("advise", "--job", str(binary)), "model 'lr' is binary", "5 classes")


def test_a_sparse_dataset_is_advised_as_sparse_with_its_csr_bytes(
    tmp_path: Path, prepared: tuple[StorageSpec, dict[str, Manifest]]
) -> None:
    storage, manifests = prepared
    workload = advise_json("--job", str(write_job(tmp_path, storage, dataset="sparse")))["workload"]
    assert workload["sparse"] is True and workload["features"] == 3000
    assert workload["dataset_bytes"] == sum(manifests["sparse"].shard_bytes)


def test_a_manifest_that_cannot_be_read_names_the_flags_to_pass(tmp_path: Path) -> None:
    nowhere = StorageSpec(bucket="advise-nowhere", endpoint_url=f"http://127.0.0.1:{free_port()}", connect_timeout_s=1)
    job = str(write_job(tmp_path, nowhere))
    failed = lambdaml("advise", "--job", job)
    assert_one_line_error(failed, "cannot read the manifest of dataset 'dense'", "--samples and --features instead")
    # With the flags that say what the data is, no storage is needed.
    workload = advise_json("--job", job, "--samples", "1e6", "--features", "28")["workload"]
    assert workload["samples"] == 1_000_000


def test_a_missing_or_broken_job_file_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(lambdaml("advise", "--job", str(tmp_path / "none.yaml")), "job file", "not found")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    assert_one_line_error(lambdaml("advise", "--job", str(broken)), "not valid YAML")
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("dataset: d\nworkers: many\n")
    assert_one_line_error(lambdaml("advise", "--job", str(invalid)), "workers")
