"""A job on a regression target fails by name instead of reporting a classifier's accuracy.

The adversary's case: a CSV with labels 0.2, 0.4, 0.6 and 0.8 prepared as "4 classes"; ``mlp``
cast them to int64 (all class 0) and printed "test accuracy 1.0000". Every model now refuses it.
"""

from __future__ import annotations

import numpy as np
import pytest

from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards
from lambdaml.driver import run_job
from lambdaml.errors import LambdaMLError
from lambdaml.runtime.records import status
from tests.helpers import Services, channel_spec


@pytest.mark.parametrize("model", ["mlp", "softmax"])
def test_a_classifier_on_a_regression_target_fails_by_name(
    model: str, services: Services, data_store: tuple[StorageSpec, Channel]
) -> None:
    if model == "mlp":
        pytest.importorskip("torch")
    spec, store = data_store
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3)).astype(np.float32)
    y = rng.choice([0.2, 0.4, 0.6, 0.8], size=80)
    manifest = shards.prepare(store, f"regression-{model}", X, y, shards=2, test_fraction=0.25, overwrite=True)
    assert manifest.n_classes == 4 and manifest.label_values is None  # kept as the file wrote them
    job = parse_job(
        {
            "name": f"reg-{model}",
            "workers": 2,
            "dataset": manifest.name,
            "storage": spec.model_dump(),
            "channel": channel_spec("redis", services).model_dump(),
            "model": {"name": model, "hidden": [4]},
            "algorithm": {"epochs": 1, "batch_size": 10},
            "sync": {"timeout_s": 30},
        }
    )
    with pytest.raises(LambdaMLError, match=r"needs class labels 0\.\.3; found 0\.[2468]") as failed:
        run_job(job, results_dir=None, job_id=f"reg-{model}-job")
    assert "\n" not in str(failed.value)
    assert status(store, f"reg-{model}-job")["state"] == "failed"
