"""A job whose model cannot fit a worker's memory is refused before anything is claimed.

``--sparse`` once prepared a dataset whose widest index was 1e9; LR passed the preflight and
every worker printed a full ``Unable to allocate 7.45 GiB`` traceback. The preflight now counts
the model's parameters, its gradient, the optimizer's and algorithm's state and the
collectives' buffers, against the worker's memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards
from lambdaml.data.sparse import CSRMatrix
from lambdaml.driver import run_job
from lambdaml.errors import ConfigError
from lambdaml.runtime.start import model_params
from tests.helpers import Services, channel_spec

WIDTH = 10**9


def job(storage: StorageSpec, services: Services, dataset: str, **model: object) -> object:
    return parse_job(
        {
            "name": "too-wide",
            "workers": 2,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": channel_spec("redis", services).model_dump(),
            "model": model or {"name": "lr"},
        }
    )


def test_a_model_too_big_for_a_worker_is_refused_before_any_claim(
    services: Services, data_store: tuple[StorageSpec, Channel]
) -> None:
    storage, store = data_store
    rows = 8
    X = CSRMatrix(np.arange(rows + 1), np.arange(rows) * (WIDTH // rows), np.ones(rows), (rows, WIDTH))
    shards.prepare(store, "too-wide", X, np.array([0.0, 1.0] * (rows // 2)), shards=2, test_fraction=0.0)
    before = store.list("jobs/")
    with pytest.raises(ConfigError) as refused:
        run_job(job(storage, services, "too-wide"), results_dir=None)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "model 'lr' on dataset 'too-wide' has 1,000,000,001 parameters" in message
    assert "GiB, over the 3008 MB it has (runtime.memory_mb" in message and "\n" not in message
    assert store.list("jobs/") == before  # nothing claimed


def test_the_counted_parameters_are_the_models_own(data_store: tuple[StorageSpec, Channel]) -> None:
    from lambdaml.models import MODELS

    _, store = data_store
    rng = np.random.default_rng(0)
    manifest = shards.prepare(
        store, "counted", rng.normal(size=(40, 6)).astype(np.float32), rng.integers(0, 3, 40).astype(float), shards=2
    )
    for model in ({"name": "softmax"}, {"name": "kmeans", "k": 4}, {"name": "mlp", "hidden": [5, 7]}):
        if model["name"] == "mlp":
            pytest.importorskip("torch")
        algorithm = {"name": "kmeans"} if model["name"] == "kmeans" else {}
        spec = parse_job({"dataset": "counted", "model": model, "algorithm": algorithm})
        built = MODELS.get(spec.model.name).build(spec.model, manifest)
        assert model_params(spec, manifest) == (built.n_params, 4 if model["name"] == "mlp" else 8), model
