"""The order in which a worker visits its shard: one function, shared with the references."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from lambdaml.arrays import Array


def epoch_order(n_rows: int, *, epoch: int, rank: int, seed: int, shuffle: bool) -> Array:
    """Row order of one worker's shard in one epoch, reproducible from (seed, epoch, rank)."""
    if not shuffle:
        return np.arange(n_rows)
    return np.random.default_rng([seed, epoch, rank]).permutation(n_rows)


def steps_per_epoch(max_shard_rows: int, batch_size: int) -> int:
    """Every worker takes the same number of steps (the largest shard's), a BSP requirement."""
    return max(1, -(-max_shard_rows // batch_size))


def batch_indices(order: Array, batch_size: int, steps: int) -> Iterator[Array]:
    """Row indices of each step; a shorter shard yields empty batches at the end."""
    for step in range(steps):
        yield order[step * batch_size : (step + 1) * batch_size]
