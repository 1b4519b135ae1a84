"""Multiclass linear models trained by real 4-worker jobs on scikit-learn's digits (10 classes).

Softmax regression under BSP GA-SGD must equal single-process SGD over the concatenated
batches (as LR does in test_ga_sgd), over S3 and Redis; MA-SGD, ASP and the Crammer-Singer
SVM must learn. A binary model on the same data is refused instead of training "0 against
the rest".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lambdaml import codec, keys
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards
from lambdaml.driver import run_job
from lambdaml.errors import ConfigError
from lambdaml.models.multiclass import SoftmaxRegression
from tests.helpers import Services, channel_spec, single_process_sgd

WORKERS = 4
DATASET = "digits-mc"
# 1,438 training rows (359 or 360 per worker), 359 test rows. 64 rows per worker a step: 6 steps
# an epoch, 48 rounds in all (moto's S3 takes ~0.2 s a round on 2 cores). Measured test accuracy
# at these settings on this split: 0.967 for softmax (GA-SGD, MA-SGD, ASP) and multiclass_svm.
SOFTMAX = {"lr": 0.5, "batch_size": 64, "epochs": 8}


@pytest.fixture(scope="module")
def digits(data_store: tuple[StorageSpec, Channel]) -> shards.Manifest:
    builtin = pytest.importorskip("lambdaml.data.builtin")
    pytest.importorskip("sklearn")
    X, y, shape = builtin.load_builtin("digits")
    # Standardized pixels (the loader's are in [0, 1], mostly 0): SGD converges in far fewer
    # rounds, which is what an S3 round trip costs. Constant pixels stay 0.
    std = X.std(axis=0)
    X = ((X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)
    return shards.prepare(data_store[1], DATASET, X, y, shards=WORKERS, test_fraction=0.2, seed=0, sample_shape=shape)


def make_job(
    storage: StorageSpec, channel: Any, model: str, algorithm: dict[str, Any], protocol: str = "bsp", l2: float = 1e-4
) -> JobSpec:
    return parse_job(
        {
            "name": f"mc-{model.replace('_', '-')}",
            "workers": WORKERS,
            "dataset": DATASET,
            "storage": storage.model_dump(),
            "channel": channel.model_dump(),
            "model": {"name": model, "l2": l2},
            "algorithm": {"seed": 7, **algorithm},
            "sync": {"protocol": protocol, "timeout_s": 120},
        }
    )


def load_model(store: Channel, job_id: str) -> np.ndarray:
    return codec.decode_bundle(store.get(keys.job_model(job_id)))["params"]


def test_digits_has_ten_classes(digits: shards.Manifest) -> None:
    assert digits.n_classes == 10 and digits.n_features == 64 and digits.train_rows == 1438


@pytest.mark.parametrize("kind", ["s3", "redis"])
def test_softmax_ga_sgd_learns_digits_and_equals_single_process_sgd(
    kind: str, services: Services, data_store: tuple[StorageSpec, Channel], digits: shards.Manifest
) -> None:
    spec, store = data_store
    job = make_job(spec, channel_spec(kind, services), "softmax", {"name": "ga_sgd", **SOFTMAX})
    result = run_job(job, results_dir=None)

    assert result.ranks_agree
    assert result.test_accuracy >= 0.95
    distributed = load_model(store, result.job_id)
    assert distributed.shape == ((64 + 1) * 10,)
    reference = single_process_sgd(store, digits, job)
    assert np.max(np.abs(distributed - reference)) <= 1e-5
    # The reported accuracy is over the ten classes: recompute it from the stored model.
    test = shards.load_test(store, digits)
    assert test is not None
    model = SoftmaxRegression(digits.n_features, n_classes=10)
    assert model.accuracy(distributed, *test) == pytest.approx(result.test_accuracy, abs=1e-12)
    assert len(np.unique(model.predict(distributed, test[0]))) == 10
    losses = [p.loss for p in result.loss_curve]
    assert losses[-1] < losses[0] < np.log(10)  # below the uniform guess's log C from the first epoch


def test_softmax_ma_sgd_learns_digits(
    services: Services, data_store: tuple[StorageSpec, Channel], digits: shards.Manifest
) -> None:
    spec, _ = data_store
    job = make_job(spec, channel_spec("redis", services), "softmax", {"name": "ma_sgd", **SOFTMAX})
    result = run_job(job, results_dir=None)
    assert result.ranks_agree
    assert result.test_accuracy >= 0.9


def test_softmax_asp_learns_digits(
    services: Services, data_store: tuple[StorageSpec, Channel], digits: shards.Manifest
) -> None:
    spec, _ = data_store
    # Each worker's step lands on the shared model: four times the updates of BSP, so half the rate.
    job = make_job(spec, channel_spec("redis", services), "softmax", {"name": "ga_sgd", **SOFTMAX, "lr": 0.25}, "asp")
    result = run_job(job, results_dir=None)
    assert result.test_accuracy >= 0.9


def test_multiclass_svm_ga_sgd_learns_digits(
    services: Services, data_store: tuple[StorageSpec, Channel], digits: shards.Manifest
) -> None:
    spec, store = data_store
    job = make_job(spec, channel_spec("redis", services), "multiclass_svm", {"name": "ga_sgd", **SOFTMAX, "lr": 0.3})
    result = run_job(job, results_dir=None)
    assert result.ranks_agree
    assert result.test_accuracy >= 0.93
    np.testing.assert_allclose(load_model(store, result.job_id), single_process_sgd(store, digits, job), atol=1e-5)


@pytest.mark.parametrize("model", ["lr", "svm"])
def test_binary_models_refuse_the_ten_classes(
    model: str, services: Services, data_store: tuple[StorageSpec, Channel], digits: shards.Manifest
) -> None:
    spec, _ = data_store
    job = make_job(spec, channel_spec("memory", None), model, {"name": "ga_sgd", **SOFTMAX, "epochs": 1})
    with pytest.raises(ConfigError, match=rf"model '{model}' is binary, but dataset '{DATASET}' has 10 classes"):
        run_job(job, results_dir=None)
