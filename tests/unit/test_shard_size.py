"""The cost model's dataset size is the bytes of the shards ``lambdaml data prepare`` really writes."""

from __future__ import annotations

import pytest

from analytic_model.shard_size import binary_dataset_bytes
from lambdaml.channels.memory import MemoryChannel
from lambdaml.data import shards, synthetic
from lambdaml.errors import ConfigError


@pytest.mark.parametrize("rows, count", [(1001, 1), (1001, 4), (999, 7)])
def test_dense_shards_hold_exactly_the_computed_bytes(rows: int, count: int) -> None:
    X, y, _ = synthetic.higgs_like(rows, seed=3)
    manifest = shards.prepare(MemoryChannel(), "dense", X, y, shards=count, test_fraction=0.1)
    computed = binary_dataset_bytes(manifest.train_rows, manifest.n_features, shards=count)
    assert computed == sum(manifest.shard_bytes)
    # The test split is the same format: its bytes follow from its rows.
    assert binary_dataset_bytes(manifest.test_rows, manifest.n_features) == manifest.test_bytes


def test_sparse_shards_hold_the_computed_bytes() -> None:
    X, y, _ = synthetic.rcv1_like(800, features=5000, nnz_per_row=21, seed=4)
    one = shards.prepare(MemoryChannel(), "one", X, y, shards=1, test_fraction=0.0)
    assert binary_dataset_bytes(800, 5000, nnz=len(X.data)) == one.shard_bytes[0]
    four = shards.prepare(MemoryChannel(), "four", X, y, shards=4, test_fraction=0.0)
    # Spread over shards, a shard's odd non-zero count pads its two 4-byte arrays to 8 bytes.
    computed = binary_dataset_bytes(800, 5000, nnz=len(X.data), shards=4)
    assert abs(computed - sum(four.shard_bytes)) <= 4 * 2 * 4


def test_a_sparse_dataset_is_far_smaller_than_its_dense_form() -> None:
    dense = binary_dataset_bytes(100_000, 47_236)
    sparse = binary_dataset_bytes(100_000, 47_236, nnz=100_000 * 75)
    assert sparse < dense / 100


def test_the_higgs_shards_are_a_sixth_of_its_text() -> None:
    # 11M rows of 28 float32 features and a float32 label, against the 8 GB CSV.
    assert binary_dataset_bytes(11_000_000, 28) == pytest.approx(11_000_000 * 29 * 4, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"samples": 0, "features": 3}, "a dataset needs rows"), ({"samples": 10, "features": 3, "nnz": 31}, "nnz")],
)
def test_impossible_shapes_are_one_line_errors(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        binary_dataset_bytes(**kwargs)
