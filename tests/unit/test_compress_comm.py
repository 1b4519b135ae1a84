"""Compressed allreduce and the ring exchange over the in-memory channel, and the algorithms
built on them run step by step: exact sums with the identity compressor, the same result on
any communicator, DCD replicas equal to the models they copy, exact resumption from a
checkpoint, and the 1-bit Adam mask.

Every rank is a thread with its own ChannelCommunicator and its own view (stats) of one
shared in-memory store, as Lambda workers each have their own client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.algorithms import AlgorithmState, reify
from lambdaml.algorithms.decentralized import CHOCOSGD, DCDPSGD, ECDPSGD
from lambdaml.algorithms.onebit_adam import OneBitAdam
from lambdaml.channels.memory import MemoryChannel
from lambdaml.comm.base import Communicator
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.compressed import CompressedAllreduce
from lambdaml.comm.ring import RingExchange, ring_neighbours
from lambdaml.compression.compressors import QSGD, Identity, MinMaxUint8, OneBit, TopK
from lambdaml.config import AlgorithmSpec
from lambdaml.data import synthetic
from lambdaml.models.linear import LogisticRegression
from tests.helpers import unique_name
from tests.unit.test_patterns import MemoryView, make_inputs

pytestmark = pytest.mark.timeout(120)


class Reader(MemoryView):
    """A rank's view of the store that remembers every key it read."""

    def __init__(self, store: MemoryChannel) -> None:
        super().__init__(store)
        self.read: list[str] = []

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        self.read.extend(keys)
        return super()._get_many(keys)


def on_threads(world: int, fn: Callable[[int], Any]) -> list[Any]:
    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(fn, range(world)))


def communicators(
    world: int, pattern: str = "scatter_reduce", store: MemoryChannel | None = None, **kw: Any
) -> list[ChannelCommunicator]:
    store = store or MemoryChannel()
    job = kw.pop("job_id", unique_name("job"))
    return [
        ChannelCommunicator(Reader(store), job, r, world, pattern=pattern, timeout_s=20.0, **kw) for r in range(world)
    ]


# --- compressed allreduce ----------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["allreduce", "scatter_reduce"])
@pytest.mark.parametrize("world", [2, 3, 5])
def test_identity_compressed_allreduce_equals_the_plain_one_bit_for_bit(pattern: str, world: int) -> None:
    inputs = make_inputs(world, 1001, np.float64, rounds=3)
    extras = [np.array([r + 1.5, 1e-3 * r]) for r in range(world)]
    plain, compressed = communicators(world, pattern), communicators(world, pattern)

    def run(rank: int) -> tuple[list[np.ndarray], list[tuple[np.ndarray, np.ndarray | None]]]:
        reducer = CompressedAllreduce(
            Identity(), rank=rank, world=world, scatter=pattern == "scatter_reduce", error_feedback=True
        )
        ours = [reducer.allreduce(compressed[rank], xs[rank], extras[rank]) for xs in inputs]
        theirs = [plain[rank].allreduce(np.concatenate([xs[rank], extras[rank]])) for xs in inputs]
        compressed[rank].finish()
        plain[rank].finish()
        return theirs, ours

    for theirs, ours in on_threads(world, run):
        for reference, (summed, summed_extras) in zip(theirs, ours, strict=True):
            np.testing.assert_array_equal(summed, reference[:-2])
            np.testing.assert_array_equal(summed_extras, reference[-2:])
    assert compressed[0].channel.list(keys.comm_prefix(compressed[0].job_id)) == []


@pytest.mark.parametrize("compressor", [OneBit(), QSGD(8), MinMaxUint8(), TopK(0.1)], ids=lambda c: type(c).__name__)
def test_compressed_allreduce_agrees_on_every_rank_and_keeps_error_feedback(compressor: Any) -> None:
    world, d, rounds = 4, 403, 40
    rng = np.random.default_rng(2)
    inputs = [[rng.standard_normal(d) for _ in range(world)] for _ in range(rounds)]
    comms = communicators(world)
    reducers = [
        CompressedAllreduce(compressor, rank=r, world=world, scatter=True, error_feedback=True, seed=3)
        for r in range(world)
    ]

    def run(rank: int) -> list[np.ndarray]:
        out = [reducers[rank].allreduce(comms[rank], xs[rank])[0] for xs in inputs]
        comms[rank].finish()
        return out

    results = on_threads(world, run)
    for r in range(1, world):
        np.testing.assert_array_equal(np.array(results[r]), np.array(results[0]))
    # Both error feedbacks telescope: what arrived over all rounds, plus the owners' memories and
    # the sum of the senders' memories, is the sum of every input.
    arrived = np.sum(results[0], axis=0)
    merged_memory = np.concatenate([reducers[j].merged[j].memory for j in range(world)])  # type: ignore[list-item]
    sent_memory = sum(np.concatenate([ef.memory for ef in red.sent]) for red in reducers)  # type: ignore[misc]
    total = np.sum([np.sum(xs, axis=0) for xs in inputs], axis=0)
    np.testing.assert_allclose(arrived + merged_memory + sent_memory, total, atol=1e-9 * np.abs(total).max())


class PlainCommunicator(Communicator):
    """A communicator that is not a channel one (as torch.distributed's is): only allreduce."""

    def __init__(self, inner: ChannelCommunicator) -> None:
        super().__init__(inner.rank, inner.world_size)
        self.inner = inner

    def _allreduce(self, x: np.ndarray) -> np.ndarray:
        return self.inner.allreduce(x)

    def barrier(self, name: str) -> None:
        self.inner.barrier(name)

    @property
    def wait_s(self) -> float:
        return self.inner.wait_s


def test_any_communicator_gets_the_same_compressed_result() -> None:
    world, rounds = 3, 5
    inputs = make_inputs(world, 301, np.float64, rounds=rounds, seed=4)
    direct, wrapped = communicators(world), communicators(world)

    def run(rank: int) -> tuple[list[Any], list[Any]]:
        results = []
        for comm in (direct[rank], PlainCommunicator(wrapped[rank])):
            reducer = CompressedAllreduce(QSGD(4), rank=rank, world=world, scatter=True, error_feedback=True, seed=9)
            results.append([reducer.allreduce(comm, xs[rank], np.array([float(rank)])) for xs in inputs])
        direct[rank].finish()
        wrapped[rank].finish()
        return results[0], results[1]

    for over_channel, over_allreduce in on_threads(world, run):
        for (a, a_extra), (b, b_extra) in zip(over_channel, over_allreduce, strict=True):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a_extra, b_extra)


def test_onebit_scatter_reduce_moves_a_thirty_second_of_the_bytes() -> None:
    world, d = 4, 200_000
    inputs = make_inputs(world, d, np.float32, rounds=1)
    plain, compressed = communicators(world), communicators(world)

    def run(rank: int) -> None:
        plain[rank].allreduce(inputs[0][rank])
        reducer = CompressedAllreduce(OneBit(), rank=rank, world=world, scatter=True, error_feedback=True)
        reducer.allreduce(compressed[rank], inputs[0][rank])

    on_threads(world, run)
    for p, c in zip(plain, compressed, strict=True):
        assert p.channel.stats.bytes_sent / c.channel.stats.bytes_sent >= 30
        assert p.channel.stats.puts == c.channel.stats.puts == world  # W-1 pieces and one merged chunk


# --- the ring ----------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 6])
def test_ring_ranks_read_only_their_neighbours_and_old_rounds_go(world: int) -> None:
    comms = communicators(world)
    rounds = 12
    most_keys = [0] * world

    def run(rank: int) -> list[dict[int, dict[str, np.ndarray]]]:
        ring = RingExchange(comms[rank])
        got = []
        for t in range(rounds):
            got.append(ring.exchange({"value": np.array([rank, t], dtype=np.float64)}))
            comms[rank].settle()  # its deletions so far done: what it still holds is what it must
            mine = [
                k
                for k in comms[rank].channel.list(keys.comm_prefix(comms[rank].job_id))
                if "/ring/" in k and keys.parse_comm_key(k).rank == rank
            ]
            most_keys[rank] = max(most_keys[rank], len(mine))
        comms[rank].finish()
        return got

    results = on_threads(world, run)
    for rank, got in enumerate(results):
        neighbours = ring_neighbours(rank, world)
        assert len(neighbours) == min(world - 1, 2)
        for t, messages in enumerate(got):
            assert sorted(messages) == neighbours
            for j, message in messages.items():
                np.testing.assert_array_equal(message["value"], [j, t])
        ring_reads = {keys.parse_comm_key(k).rank for k in comms[rank].channel.inner.read if "/ring/" in k}  # type: ignore[attr-defined]
        assert ring_reads == set(neighbours), f"rank {rank} read {sorted(ring_reads)}"
    if world > 1:
        # Each rank holds its messages of the last W//2 rounds (the ranks W//2 hops away may
        # still read them) and no more; nothing is left after the job.
        assert most_keys == [world // 2] * world
        assert comms[0].channel.list(keys.comm_prefix(comms[0].job_id)) == []


# --- the algorithms, step by step ------------------------------------------------------


WORLD = 4
EPOCH_STEPS = 4
DATA = synthetic.higgs_like(WORLD * 64, seed=2)


def spec_for(name: str, **fields: Any) -> AlgorithmSpec:
    return AlgorithmSpec(**{"name": name, "lr": 0.3, "seed": 1, **fields})


def batches(rank: int, step: int, data: tuple[np.ndarray, np.ndarray], size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    X, y = data
    shard = slice(rank * 64, (rank + 1) * 64)
    rows = np.random.default_rng([rank, step]).choice(64, size=size, replace=False)
    return X[shard][rows], y[shard][rows]


def make_states(spec: AlgorithmSpec, comms: list[ChannelCommunicator]) -> list[AlgorithmState]:
    model = LogisticRegression(DATA[0].shape[1])
    return [reify(spec, model, comm, model.init_params(spec.seed)) for comm in comms]


def train(
    states: list[AlgorithmState],
    steps: range,
    after_step: Callable[[list[AlgorithmState]], None] | None = None,
    data: tuple[np.ndarray, np.ndarray] = DATA[:2],
) -> None:
    barrier = threading.Barrier(len(states))

    def run(rank: int) -> None:
        for step in steps:
            states[rank].step(*batches(rank, step, data))
            if (step + 1) % EPOCH_STEPS == 0:
                states[rank].end_epoch(step // EPOCH_STEPS)
            if after_step is not None:
                barrier.wait(timeout=20)
                if rank == 0:
                    after_step(states)
                barrier.wait(timeout=20)

    on_threads(len(states), run)


@pytest.mark.parametrize("compression", ["uint8", "onebit", "qsgd", "topk"])
def test_dcd_replicas_equal_the_neighbours_true_models_at_every_step(compression: str) -> None:
    states = make_states(spec_for("dcd_psgd", compression={"name": compression}), communicators(WORLD))
    checked = []

    def check(states: list[AlgorithmState]) -> None:
        for state in states:
            assert isinstance(state, DCDPSGD)
            for j, replica in state.replicas.items():
                np.testing.assert_array_equal(replica, states[j].params)
        checked.append(float(np.abs(states[0].params).max()))

    train(states, range(12), check)
    assert len(checked) == 12 and checked[-1] > 0, "the models moved"


CHECKPOINTED = [
    ("ga_sgd", {"compression": {"name": "qsgd", "levels": 4}}),
    ("ma_sgd", {"compression": {"name": "onebit"}}),
    ("onebit_adam", {"warmup_steps": 3, "lr": 0.05}),
    ("dcd_psgd", {"compression": {"name": "topk", "ratio": 0.2}}),
    ("ecd_psgd", {"compression": {"name": "qsgd", "levels": 16}}),
    ("choco_sgd", {"compression": {"name": "onebit"}, "gamma": 0.3}),
]


@pytest.mark.parametrize(("name", "fields"), CHECKPOINTED, ids=[c[0] for c in CHECKPOINTED])
def test_a_run_resumed_from_state_dicts_ends_exactly_where_an_uninterrupted_one_does(
    name: str, fields: dict[str, Any]
) -> None:
    spec = spec_for(name, **fields)
    uninterrupted = make_states(spec, communicators(WORLD))
    train(uninterrupted, range(8))  # two epochs: MA-SGD averages twice

    first = communicators(WORLD)
    interrupted = make_states(spec, first)
    train(interrupted, range(5))
    saved = [s.state_dict() for s in interrupted]
    for comm in first:
        comm.finish(early=True)
    store = first[0].channel.inner  # type: ignore[attr-defined]  # under the seal
    assert isinstance(store, MemoryView)
    shared = MemoryChannel()
    shared._data, shared._lock = store._data, store._lock
    resumed = make_states(spec, communicators(WORLD, store=shared, job_id=first[0].job_id, first_round=first[0].round))
    for state, saved_state in zip(resumed, saved, strict=True):
        state.load_state_dict(saved_state)
    train(resumed, range(5, 8))
    for got, want in zip(resumed, uninterrupted, strict=True):
        np.testing.assert_array_equal(got.params, want.params)


def test_onebit_adam_masks_coordinates_whose_gradient_was_always_zero() -> None:
    X = DATA[0].copy()
    dead = 3
    X[:, dead] = 0.0  # a feature that is zero everywhere: its weight's momentum stays exactly zero
    states = make_states(spec_for("onebit_adam", warmup_steps=4, lr=0.05), communicators(WORLD))
    train(states, range(12), data=(X, DATA[1]))
    for state in states:
        assert isinstance(state, OneBitAdam)
        assert state.keep.sum() == state.params.size - 1 and not state.keep[dead]
        assert state.params[dead] == 0.0, "a masked coordinate never moves"
        assert np.abs(state.params).max() < 10, "no update was divided by eps"
        np.testing.assert_array_equal(state.params, states[0].params)


@pytest.mark.parametrize("kind", [ECDPSGD, CHOCOSGD])
def test_ring_methods_with_one_or_two_workers(kind: type) -> None:
    name = {ECDPSGD: "ecd_psgd", CHOCOSGD: "choco_sgd"}[kind]
    for world in (1, 2):
        comms = communicators(world)
        states = make_states(spec_for(name, compression={"name": "uint8"}), comms)
        train(states, range(6))
        on_threads(world, lambda r, states=states: states[r].finish())
        # W = 2: six ring rounds, one loss sum at the end of the first epoch, one final average.
        assert comms[0].round == (8 if world == 2 else 0)
        for state in states:
            np.testing.assert_array_equal(state.params, states[0].params)
            assert np.abs(state.params).max() > 0
