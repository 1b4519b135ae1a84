"""Models beyond dense LR, trained by real 4-worker jobs: MLP on digits, SVM, sparse data,
and the convolutional models on 32x32 images."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from tests.helpers import Services, channel_spec

WORKERS = 4


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    return data_store


def run(storage: StorageSpec, channel: Any, dataset: str, model: dict[str, Any], algorithm: dict[str, Any]) -> Any:
    job = parse_job(
        {
            "name": f"m-{model['name']}",
            "workers": WORKERS,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": channel.model_dump(),
            "model": model,
            "algorithm": {"seed": 0, **algorithm},
            "sync": {"timeout_s": 120},
        }
    )
    return run_job(job, results_dir=None)


def test_mlp_on_digits_with_four_workers(services: Services, storage: tuple[StorageSpec, Channel]) -> None:
    builtin = pytest.importorskip("lambdaml.data.builtin")
    pytest.importorskip("sklearn")
    pytest.importorskip("torch")
    spec, store = storage
    X, y, shape = builtin.load_builtin("digits")
    shards.prepare(store, "digits", X, y, shards=WORKERS, test_fraction=0.2, sample_shape=shape)
    result = run(
        spec,
        channel_spec("redis", services),
        "digits",
        {"name": "mlp", "hidden": [128]},
        {"name": "ga_sgd", "lr": 1.0, "batch_size": 32, "epochs": 30},
    )
    assert result.ranks_agree
    assert result.test_accuracy >= 0.95


@pytest.mark.parametrize("algorithm", ["ga_sgd", "ma_sgd"])
def test_svm_on_breast_cancer(algorithm: str, services: Services, storage: tuple[StorageSpec, Channel]) -> None:
    builtin = pytest.importorskip("lambdaml.data.builtin")
    pytest.importorskip("sklearn")
    spec, store = storage
    X, y, _ = builtin.load_builtin("breast_cancer")
    shards.prepare(store, "cancer", X, y, shards=WORKERS, test_fraction=0.25, seed=1, overwrite=True)
    result = run(
        spec,
        channel_spec("memcached", services),
        "cancer",
        {"name": "svm", "l2": 1e-3},
        {"name": algorithm, "lr": 0.05, "batch_size": 16, "epochs": 10},
    )
    assert result.test_accuracy >= 0.94
    assert result.loss_curve[-1].loss < result.loss_curve[0].loss


@pytest.mark.parametrize("model", ["lr", "svm"])
def test_sparse_rcv1_like_data(model: str, services: Services, storage: tuple[StorageSpec, Channel]) -> None:
    spec, store = storage
    X, y, _ = synthetic.rcv1_like(6000, features=20_000, seed=3)
    manifest = shards.prepare(store, f"rcv1-{model}", X, y, shards=WORKERS, test_fraction=0.2)
    assert manifest.format == "csr"
    result = run(
        spec,
        channel_spec("redis", services),
        f"rcv1-{model}",
        {"name": model},
        {"name": "ga_sgd", "lr": 5.0 if model == "lr" else 2.0, "batch_size": 10, "epochs": 4},
    )
    assert result.test_accuracy >= 0.7
    assert result.loss_curve[-1].loss < result.loss_curve[0].loss
    # 20,001 float64 parameters travel as one vector each round.
    rounds = 4 * result.workers[0].rows // 10
    assert result.workers[1].channel.bytes_sent >= rounds * 20_001 * 8


@pytest.mark.parametrize("model", ["mobilenet", "resnet18"])
def test_convolutional_models_train_on_32x32_images(
    model: str, services: Services, storage: tuple[StorageSpec, Channel]
) -> None:
    pytest.importorskip("torch")
    spec, store = storage
    # Two classes a convolution tells apart at once: bright top half or bright bottom half.
    rng = np.random.default_rng(0)
    y = rng.integers(2, size=160).astype(np.float32)
    images = rng.uniform(0, 0.3, size=(160, 3, 32, 32)).astype(np.float32)
    images[y == 0, :, :16] += 0.7
    images[y == 1, :, 16:] += 0.7
    shards.prepare(store, f"img-{model}", images.reshape(160, -1), y, shards=WORKERS, sample_shape=[3, 32, 32])
    result = run(
        spec,
        channel_spec("redis", services),
        f"img-{model}",
        {"name": model, "width": 0.125},
        {"name": "ga_sgd", "lr": 0.05, "batch_size": 8, "epochs": 3, "optimizer": "momentum"},
    )
    assert result.ranks_agree
    assert result.loss_curve[-1].loss < result.loss_curve[0].loss
    assert result.test_accuracy >= 0.9
