"""AllReduce and ScatterReduce over the in-memory channel: exact sums, request counts, cleanup.

Every rank runs as a thread with its own ChannelCommunicator, as Lambda workers each have
their own client; the store they share is one MemoryChannel.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from lambdaml import codec, keys, seal
from lambdaml.channels.base import Channel
from lambdaml.channels.memory import MemoryChannel
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.patterns import chunk_bounds
from lambdaml.errors import CodecError
from tests.helpers import unique_name

PATTERNS = ["allreduce", "scatter_reduce"]
HEADER = 24 + 8 + seal.OVERHEAD  # codec header, the shape of a 1-d tensor, and the seal binding it to its key


class MemoryView(MemoryChannel):
    """One worker's client of a shared in-memory store: its own stats, the store's data.

    It also counts the GETs that found a value, so polling misses can be told apart from
    the data requests a pattern issues.
    """

    def __init__(self, store: MemoryChannel) -> None:
        super().__init__()
        self._data = store._data
        self._lock = store._lock
        self.hits = 0
        self._hits_lock = threading.Lock()

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found = super()._get_many(keys)
        with self._hits_lock:
            self.hits += len(found)
        return found


def make_inputs(world: int, d: int, dtype: type, rounds: int = 1, seed: int = 0) -> list[list[np.ndarray]]:
    """Per round, per rank: values of mixed magnitudes, so a different summation order changes bits."""
    rng = np.random.default_rng(seed)
    return [
        [(rng.standard_normal(d) * 10.0 ** rng.integers(-4, 5, size=d)).astype(dtype) for _ in range(world)]
        for _ in range(rounds)
    ]


def run_world(
    channels: Sequence[Channel],
    inputs: list[list[np.ndarray]],
    pattern: str,
    *,
    job_id: str | None = None,
    before_finish: Callable[[], None] | None = None,
) -> list[list[np.ndarray]]:
    """Run ``len(inputs)`` allreduce rounds on W threads, then finish() on each; return results[round][rank].

    ``before_finish`` runs once, on rank 0, when every rank is done with its rounds and with
    the deletions of old rounds it started (they run in the background).
    """
    world = len(channels)
    job_id = job_id or unique_name("job")
    comms = [ChannelCommunicator(channels[r], job_id, r, world, pattern=pattern, timeout_s=20.0) for r in range(world)]
    barrier = threading.Barrier(world)

    def worker(rank: int) -> list[np.ndarray]:
        results = [comms[rank].allreduce(xs[rank]) for xs in inputs]
        if before_finish is not None:
            comms[rank].settle()
            barrier.wait(timeout=20)
            if rank == 0:
                before_finish()
            barrier.wait(timeout=20)
        comms[rank].finish()
        return results

    with ThreadPoolExecutor(world) as pool:
        per_rank = list(pool.map(worker, range(world)))
    return [[per_rank[r][i] for r in range(world)] for i in range(len(inputs))]


def rank_order_sum(xs: list[np.ndarray]) -> np.ndarray:
    total = xs[0].copy()
    for x in xs[1:]:
        total += x
    return total


@pytest.mark.parametrize("size, parts", [(0, 1), (0, 3), (1, 8), (3, 4), (7, 3), (1000, 7), (1001, 8)])
def test_chunk_bounds_match_array_split(size: int, parts: int) -> None:
    expected = [len(c) for c in np.array_split(np.arange(size), parts)]
    bounds = chunk_bounds(size, parts)
    assert [hi - lo for lo, hi in bounds] == expected
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


def test_inputs_are_order_sensitive() -> None:
    """Guard for the exactness tests: summing these inputs in another order changes the result."""
    xs = make_inputs(4, 1000, np.float32)[0]
    assert not np.array_equal(rank_order_sum(xs), rank_order_sum(xs[::-1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 3, 7, 1000])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_patterns_give_the_exact_rank_order_sum(world: int, d: int, dtype: type) -> None:
    inputs = make_inputs(world, d, dtype, rounds=2, seed=world * 1000 + d)
    store = MemoryChannel()
    outcome = {p: run_world([store] * world, inputs, p) for p in PATTERNS}
    for i, xs in enumerate(inputs):
        # The left fold x0 + x1 + ... in rank order. (np.sum over a stacked axis is not always that:
        # for d=1 it sums the W values pairwise, which differs in the last bit at W=8.)
        expected = rank_order_sum(xs)
        assert np.allclose(expected, np.sum(np.stack(xs), axis=0), rtol=1e-5, atol=1e-3)
        for pattern in PATTERNS:
            for rank, got in enumerate(outcome[pattern][i]):
                assert got.dtype == dtype and got.shape == (d,), (pattern, rank)
                assert np.array_equal(got, expected), f"{pattern} rank {rank} round {i}"
        # The two patterns agree bit for bit on every rank.
        for got_sr, got_ar in zip(outcome["scatter_reduce"][i], outcome["allreduce"][i], strict=True):
            assert np.abs(got_sr.astype(np.float64) - got_ar).max() <= 1e-6
            assert got_sr.tobytes() == got_ar.tobytes()
    assert store.list("comm/") == []  # finish() on every rank left nothing behind


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_keep_the_shape_and_do_not_touch_the_input(pattern: str) -> None:
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((5, 7)) for _ in range(3)]
    originals = [x.copy() for x in xs]
    results = run_world([MemoryChannel()], [xs[:1]], pattern)  # W=1: a copy, no requests
    assert np.array_equal(results[0][0], xs[0]) and results[0][0] is not xs[0]
    store = MemoryChannel()
    results = run_world([store] * 3, [xs], pattern)
    for got in results[0]:
        assert got.shape == (5, 7)
        assert np.array_equal(got, rank_order_sum(xs))
        got += 1.0  # writable, and owned by the caller
    assert all(np.array_equal(x, o) for x, o in zip(xs, originals, strict=True))


def expected_traffic(pattern: str, world: int, d: int, itemsize: int, rank: int) -> tuple[int, int, int, int]:
    """(puts, data gets, bytes sent, bytes received) of one rank in one round.

    ScatterReduce sends every chunk once (W-1 pieces plus its merged chunk): d*s + 32*W
    bytes, and receives W-1 pieces and W-1 merged chunks: 2*(W-1)*(32 + s*d/W) when W
    divides d, so a rank moves about (3 - 2/W) vectors whatever W is. AllReduce's
    aggregator moves W+1 vectors, the other ranks 2.
    """
    if world == 1:
        return 0, 0, 0, 0
    if pattern == "allreduce":
        vector = HEADER + d * itemsize
        if rank == 0:  # the aggregator reads W-1 vectors and writes the sum
            return 1, world - 1, vector, (world - 1) * vector
        return 1, 1, vector, vector
    sizes = [hi - lo for lo, hi in chunk_bounds(d, world)]
    own = sizes[rank]
    # Sent: W-1 pieces of the chunks others own, plus my merged chunk: every chunk once.
    sent = sum(HEADER + n * itemsize for n in sizes)
    # Received: W-1 pieces of my chunk, then the W-1 merged chunks I do not own.
    received = (world - 1) * (HEADER + own * itemsize) + sum(
        HEADER + n * itemsize for j, n in enumerate(sizes) if j != rank
    )
    return world, 2 * (world - 1), sent, received


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("world, d", [(1, 10), (2, 1000), (3, 7), (4, 1001), (8, 3), (8, 1000)])
def test_requests_and_bytes_per_worker_per_round(pattern: str, world: int, d: int) -> None:
    rounds = 3
    store = MemoryChannel()
    views = [MemoryView(store) for _ in range(world)]
    inputs = make_inputs(world, d, np.float32, rounds=rounds)
    snapshots: list[dict[str, int]] = []
    hits: list[int] = []

    def snapshot() -> None:  # after the rounds, before finish() adds its barrier traffic
        snapshots.extend(v.stats.as_dict() for v in views)
        hits.extend(v.hits for v in views)

    run_world(views, inputs, pattern, before_finish=snapshot)
    for rank in range(world):
        puts, gets, sent, received = expected_traffic(pattern, world, d, 4, rank)
        stats = snapshots[rank]
        assert stats["puts"] == rounds * puts, rank
        assert hits[rank] == rounds * gets, rank  # GETs that returned data; the rest were polling misses
        assert stats["gets"] >= hits[rank]
        assert stats["bytes_sent"] == rounds * sent, rank
        assert stats["bytes_received"] == rounds * received, rank
        if pattern == "scatter_reduce" and world > 1:  # a world of one sends nothing
            assert stats["puts"] + hits[rank] == rounds * (3 * world - 2)


def rounds_left_before_finish(pattern: str, world: int, rounds: int) -> list[set[int]]:
    """The rounds whose keys are on the channel once every rank is done with its rounds (and
    with its deletions), seen from ``before_finish``; and that finish leaves nothing."""
    store = MemoryChannel()
    job_id = unique_name("job")
    seen: list[set[int]] = []

    def rounds_present() -> None:
        seen.append({keys.parse_comm_key(k).round for k in store.list(keys.comm_prefix(job_id))})

    inputs = make_inputs(world, 100, np.float64, rounds)
    run_world([store] * world, inputs, pattern, job_id=job_id, before_finish=rounds_present)
    assert store.list(keys.comm_prefix(job_id)) == []
    return seen


@pytest.mark.parametrize("pattern", PATTERNS)
def test_old_rounds_are_retired_and_finish_leaves_nothing(pattern: str) -> None:
    assert rounds_left_before_finish(pattern, world=4, rounds=5) == [{4}]  # rounds 0..3 went while the job ran


@pytest.mark.parametrize("damage", ["dtype", "shape", "bit flip"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_corrupt_or_mismatched_value_raises_codec_error(pattern: str, damage: str) -> None:
    """A value of the wrong kind, or corrupted on the channel, is rejected, not summed."""
    store = MemoryChannel()
    comm = ChannelCommunicator(store, unique_name("job"), 0, 2, pattern=pattern, timeout_s=5.0)
    # Rank 1's contribution that rank 0 reads: its whole vector, or its piece of chunk 0 (2 of 4 elements).
    tag, chunk, size = ("ar", None, 4) if pattern == "allreduce" else ("sr", 0, 2)
    value = {
        "dtype": codec.encode(np.zeros(size, np.float64)),
        "shape": codec.encode(np.zeros(size + 1, np.float32)),
        "bit flip": codec.encode(np.zeros(size, np.float32))[:-1] + b"\x01",
    }[damage]
    key = comm.key(0, tag, rank=1, chunk=chunk)
    store.put(key, seal.Sealer().seal(key, value))  # in its place: the codec is what must refuse it
    expected = {"dtype": "dtype", "shape": "shape", "bit flip": "checksum"}[damage]
    with pytest.raises(CodecError, match=expected):
        comm.allreduce(np.zeros(4, np.float32))
