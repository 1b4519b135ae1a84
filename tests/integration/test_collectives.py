"""AllReduce, ScatterReduce and 2-D ScatterReduce over the real channels (moto S3/DynamoDB, Redis, Memcached).

Four ranks run as threads, each with its own channel client as Lambda workers would have.
Both patterns must return the exact rank-order sum, identical on every rank, and leave
nothing on the channel after ``finish()``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.channels import Channel, open_channel
from lambdaml.comm.channel import ChannelCommunicator
from tests.helpers import Services, channel_spec, unique_name

WORKERS = 4
D = 100_000
ROUNDS = 2


def run_pattern(
    channels: list[Channel], inputs: list[list[np.ndarray]], pattern: str, job_id: str
) -> list[list[np.ndarray]]:
    """results[round][rank] of ``len(inputs)`` rounds on one thread per rank (one per channel)."""
    world = len(channels)

    def worker(rank: int) -> list[np.ndarray]:
        comm = ChannelCommunicator(channels[rank], job_id, rank, world, pattern=pattern, timeout_s=60.0)
        out = [comm.allreduce(xs[rank]) for xs in inputs]
        comm.finish()
        return out

    with ThreadPoolExecutor(world) as pool:
        per_rank = list(pool.map(worker, range(world)))
    return [[per_rank[r][i] for r in range(world)] for i in range(len(inputs))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["s3", "redis", "memcached", "dynamodb"])
def test_scatter_reduce_equals_allreduce_on_real_channels(services: Services, kind: str, dtype: type) -> None:
    spec = channel_spec(kind, services)
    channels = [open_channel(spec) for _ in range(WORKERS)]
    channels[0].ensure()
    rng = np.random.default_rng(11)
    inputs: list[list[np.ndarray]] = [
        [(rng.standard_normal(D) * 10.0 ** rng.integers(-4, 5, size=D)).astype(dtype) for _ in range(WORKERS)]
        for _ in range(ROUNDS)
    ]
    try:
        results = {}
        for pattern in ("allreduce", "scatter_reduce"):
            job_id = unique_name("coll")
            results[pattern] = run_pattern(channels, inputs, pattern, job_id)
            assert channels[0].list(keys.comm_prefix(job_id)) == [], f"{pattern} left keys on {kind}"
        for i, xs in enumerate(inputs):
            expected = xs[0].copy()
            for x in xs[1:]:
                expected += x
            for rank in range(WORKERS):
                sr, ar = results["scatter_reduce"][i][rank], results["allreduce"][i][rank]
                assert sr.dtype == dtype and sr.shape == (D,)
                assert np.array_equal(ar, expected), f"allreduce rank {rank} round {i}"
                assert np.array_equal(sr, expected), f"scatter_reduce rank {rank} round {i}"
                assert np.abs(sr.astype(np.float64) - ar).max() <= 1e-6
    finally:
        for channel in channels:
            channel.close()


@pytest.mark.parametrize("world", [4, 6, 9])
@pytest.mark.parametrize("kind", ["s3", "redis"])
def test_scatter_reduce_2d_is_the_flat_sum_on_every_rank_and_run(services: Services, kind: str, world: int) -> None:
    """The grid regroups the flat sum: within rounding of it, the same bits on every rank and run."""
    spec = channel_spec(kind, services)
    channels = [open_channel(spec) for _ in range(world)]
    channels[0].ensure()
    rng = np.random.default_rng(world)
    d = 10_000
    inputs = [[(rng.standard_normal(d) * 10.0 ** rng.integers(-4, 5, size=d)).astype(np.float32) for _ in range(world)]]
    try:
        runs = {}
        for name, pattern in (
            ("flat", "scatter_reduce"),
            ("grid", "scatter_reduce_2d"),
            ("again", "scatter_reduce_2d"),
        ):
            job_id = unique_name("grid")
            runs[name] = run_pattern(channels, inputs, pattern, job_id)
            assert channels[0].list(keys.comm_prefix(job_id)) == [], f"{pattern} left keys on {kind}"
        flat, grid = runs["flat"][0][0].astype(np.float64), runs["grid"][0][0]
        for rank in range(world):
            assert runs["grid"][0][rank].tobytes() == grid.tobytes(), f"rank {rank}"
            assert runs["again"][0][rank].tobytes() == grid.tobytes(), f"rank {rank}, second run"
        exact = np.sum(np.stack(inputs[0]).astype(np.float64), axis=0)
        assert np.max(np.abs(grid - flat)) <= 1e-6 * np.max(np.abs(flat))
        assert np.max(np.abs(grid - exact)) <= 1e-6 * np.max(np.abs(exact))
    finally:
        for channel in channels:
            channel.close()
