"""The IaaS baseline: the same jobs on torchrun + gloo as on the FaaS backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lambdaml import codec, keys
from lambdaml.channels import Channel
from lambdaml.cli import main
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.data.builtin import load_builtin
from lambdaml.driver import run_job
from lambdaml.errors import ConfigError, JobFailed
from lambdaml.runtime.reports import JobResult
from tests.helpers import Services, channel_spec

pytestmark = pytest.mark.timeout(300)

WORKERS = 4


def job_for(storage: StorageSpec, services: Services, dataset: str, **fields: Any) -> JobSpec:
    model = fields.pop("model", {"name": "lr", "l2": 1e-3})
    sync = fields.pop("sync", {"timeout_s": 60})
    return parse_job(
        {
            "name": "iaas",
            "workers": fields.pop("workers", WORKERS),
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": channel_spec("redis", services).model_dump(),
            "model": model,
            "algorithm": {"name": "ga_sgd", "seed": 7, "epochs": 2, "batch_size": 40, "lr": 0.5, **fields},
            "sync": sync,
        }
    )


def model_of(store: Channel, result: JobResult) -> np.ndarray:
    return codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]


@pytest.fixture(scope="module")
def higgs(data_store: tuple[StorageSpec, Channel]) -> str:
    # 1,922 training rows in shards of 481, 481, 480, 480: the last batches are unequal.
    X, y, _ = synthetic.higgs_like(2403, seed=3)
    shards.prepare(data_store[1], "iaas-higgs", X, y, shards=WORKERS, test_fraction=0.2, seed=1)
    return "iaas-higgs"


def test_ga_sgd_on_gloo_equals_the_faas_run(
    services: Services,
    data_store: tuple[StorageSpec, Channel],
    higgs: str,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec, store = data_store
    job = job_for(spec, services, higgs)
    faas = run_job(job, backend="local", results_dir=tmp_path)
    iaas = run_job(job, backend="iaas-local", results_dir=tmp_path)

    assert np.max(np.abs(model_of(store, iaas) - model_of(store, faas))) <= 1e-5
    assert iaas.ranks_agree and iaas.backend == "iaas-local"
    assert [p.loss for p in iaas.loss_curve] == pytest.approx([p.loss for p in faas.loss_curve], rel=1e-6)
    # Same record as a FaaS run, billed as EC2: one instance per worker, at least a minute each.
    assert len(iaas.workers) == WORKERS
    steps = 13  # ceil(481 / 40) rounds per epoch, two epochs
    assert all(w.channel.requests == 2 * steps for w in iaas.workers)
    # The FaaS run is priced as Lambda bills it: each worker's time at the worker's memory.
    lam = faas.cost["lambda"]
    busy = sum(w.times.total_s for w in faas.workers) * job.runtime.memory_mb / 1024
    # Lambda bills each invocation's duration rounded up to the millisecond: up to 1 ms a worker more.
    rounding = WORKERS * 0.001 * job.runtime.memory_mb / 1024
    assert lam["invocations"] == WORKERS and lam["gb_seconds"] == pytest.approx(busy, rel=1e-3, abs=rounding)
    ec2 = iaas.cost["ec2"]
    assert ec2["instances"] == WORKERS and ec2["seconds_billed"] >= 60
    assert iaas.cost["total_dollars"] == pytest.approx(WORKERS * ec2["seconds_billed"] * ec2["dollars_per_hour"] / 3600)

    # Side by side: a table with both runs and their ratios, and the loss/time/dollars plot.
    plot = tmp_path / "compare.png"
    assert main(["compare", faas.result_path, iaas.result_path, "--plot", str(plot)]) == 0
    table = capsys.readouterr().out
    assert "local redis W=4" in table and "iaas-local gloo W=4" in table
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", str(tmp_path / "missing.json")]) == 1
    assert "missing.json: no such result file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "ma_sgd", "local_epochs": 1, "lr": 0.3},
        {"name": "admm", "rho": 0.1, "lr": 0.3},
    ],
    ids=["ma_sgd", "admm"],
)
def test_model_averaging_algorithms_run_on_gloo(
    algorithm: dict[str, Any], services: Services, data_store: tuple[StorageSpec, Channel], higgs: str, tmp_path: Any
) -> None:
    spec = data_store[0]
    job = job_for(spec, services, higgs, epochs=3, **algorithm)
    iaas = run_job(job, backend="iaas-local", results_dir=tmp_path)
    losses = [p.loss for p in iaas.loss_curve]
    assert losses[-1] < losses[0]
    assert iaas.ranks_agree
    assert iaas.test_loss < 0.9 * np.log(2)  # well below the all-zero model's loss


def test_mlp_trains_with_distributed_data_parallel(
    services: Services, data_store: tuple[StorageSpec, Channel], tmp_path: Any
) -> None:
    spec, store = data_store
    X, y, _ = load_builtin("digits")
    shards.prepare(store, "iaas-digits", X, y, shards=2, test_fraction=0.2, seed=0)
    job = job_for(
        spec, services, "iaas-digits", workers=2, model={"name": "mlp", "hidden": [32]}, epochs=4, lr=0.5, batch_size=32
    )
    iaas = run_job(job, backend="iaas-local", results_dir=tmp_path)
    faas = run_job(job, backend="local", results_dir=tmp_path)
    # DDP sums gradients in backward; the model must match the channel path's to float rounding.
    assert np.max(np.abs(model_of(store, iaas) - model_of(store, faas))) <= 1e-4
    assert iaas.test_accuracy >= 0.85
    # Only the two statistics travel through the communicator; gradients go through DDP.
    assert iaas.workers[0].channel.bytes_sent < 1000 * iaas.workers[0].channel.requests


def test_asynchronous_jobs_are_refused_on_gloo(
    services: Services, data_store: tuple[StorageSpec, Channel], higgs: str, tmp_path: Any
) -> None:
    job = job_for(data_store[0], services, higgs, sync={"protocol": "asp", "timeout_s": 10})
    with pytest.raises(ConfigError, match="bsp"):
        run_job(job, backend="iaas-local", results_dir=tmp_path)


def test_a_worker_error_fails_the_job_with_its_message(
    services: Services, data_store: tuple[StorageSpec, Channel], higgs: str, tmp_path: Any
) -> None:
    # A shard that vanishes after the preflight: only rank 3 finds out, inside torchrun.
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(400, seed=1)
    manifest = shards.prepare(store, "iaas-gone", X, y, shards=WORKERS, test_fraction=0.0, seed=0)
    job = job_for(spec, services, "iaas-gone")
    store.delete([keys.dataset_shard("iaas-gone", manifest.dataset_version, 3)])
    with pytest.raises(JobFailed, match=r"worker 3 failed:.*iaas-gone"):
        run_job(job, backend="iaas-local", results_dir=tmp_path)
