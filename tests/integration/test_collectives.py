"""AllReduce, ScatterReduce and 2-D ScatterReduce over the real channels (moto S3/DynamoDB, Redis, Memcached).

Four ranks run as threads, each with its own channel client as Lambda workers would have.
Both patterns must return the exact rank-order sum, identical on every rank, and leave
nothing on the channel after ``finish()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from analytic_model.collectives import grid_requests, packs_pieces, pattern_requests
from lambdaml import codec, keys, seal
from lambdaml.buffers import Value, joined
from lambdaml.channels import Channel, open_channel
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.trial import PatternTrial
from lambdaml.errors import LambdaMLError
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


@pytest.mark.parametrize("pattern", ["allreduce", "scatter_reduce"])
def test_chunked_values_on_memcached_sum_to_the_same_bits(services: Services, pattern: str) -> None:
    """Every value over the item limit: each written in one request, its manifest last, and read
    with its manifest in one get where its length is known (pieces, merged values)."""
    spec = channel_spec("memcached", services).model_copy(update={"max_item_bytes": 40_000})
    channels = [open_channel(spec) for _ in range(WORKERS)]
    rng = np.random.default_rng(12)
    inputs = [[rng.standard_normal(D).astype(np.float32) for _ in range(WORKERS)] for _ in range(ROUNDS)]
    try:
        job_id = unique_name("chunked")
        results = run_pattern(channels, inputs, pattern, job_id)
        assert channels[0].list(keys.comm_prefix(job_id)) == []
        for i, xs in enumerate(inputs):
            expected = xs[0].copy()
            for x in xs[1:]:
                expected += x
            assert all(np.array_equal(result, expected) for result in results[i]), f"round {i}"
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


@pytest.mark.parametrize("world", [6, 9])
def test_scatter_reduce_2d_on_s3_puts_four_times_per_worker_per_round(services: Services, world: int) -> None:
    """The row pieces in one packed value and the column pieces in another: 4 puts a worker a round
    instead of r + c, the same bits as the unpacked grid, and the counts the analytic model prices."""
    spec = channel_spec("s3", services)
    channels = [open_channel(spec) for _ in range(world)]
    channels[0].ensure()
    d = 1003  # chunks and segments of unequal lengths
    rng = np.random.default_rng(world)
    inputs = [[rng.standard_normal(d) * 10.0 ** rng.integers(-4, 5, size=d) for _ in range(world)] for _ in range(3)]
    try:
        counted: dict[int, list[int]] = {}
        for rounds in (1, 3):
            before = [c.stats.as_dict()["puts"] for c in channels]
            packed = run_pattern(channels, inputs[:rounds], "scatter_reduce_2d", unique_name("grid"))
            counted[rounds] = [c.stats.as_dict()["puts"] - b for c, b in zip(channels, before, strict=True)]
        assert [(counted[3][r] - counted[1][r]) / 2 for r in range(world)] == [4] * world
        header = len(codec.encode(np.zeros(0))) + seal.OVERHEAD
        assert grid_requests(world, d * 8, header, packed=packs_pieces("s3")).puts / world == 4

        for channel in channels:  # the unpacked layout: r + c puts a worker
            channel.ranged_reads = False  # type: ignore[misc]
        unpacked = run_pattern(channels, inputs, "scatter_reduce_2d", unique_name("grid"))
        for i in range(3):
            for rank in range(world):
                assert packed[i][rank].tobytes() == unpacked[i][rank].tobytes(), f"round {i} rank {rank}"
    finally:
        for channel in channels:
            channel.close()


def run_world(
    channels: list[Channel], inputs: list[list[np.ndarray]], job_id: str, timeout_s: float = 60.0
) -> list[list[np.ndarray | BaseException]]:
    """ScatterReduce over ``len(channels)`` ranks; per rank its results, or the error it stopped with."""
    world = len(channels)

    def worker(rank: int) -> list[np.ndarray | BaseException]:
        comm = ChannelCommunicator(channels[rank], job_id, rank, world, pattern="scatter_reduce", timeout_s=timeout_s)
        try:
            out: list[np.ndarray | BaseException] = [comm.allreduce(xs[rank]) for xs in inputs]
            comm.finish()
        except Exception as exc:
            return [exc]
        return out

    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(worker, range(world)))


@pytest.mark.parametrize("world", [4, 8])
def test_scatter_reduce_on_s3_puts_twice_per_worker_per_round(services: Services, world: int) -> None:
    """One packed value of the W-1 pieces and one merged chunk per worker per round, the same sum
    bit for bit as the flat layout, and the request counts the analytic model prices."""
    spec = channel_spec("s3", services)
    channels = [open_channel(spec) for _ in range(world)]
    channels[0].ensure()
    d = 1003  # chunks of unequal lengths
    rng = np.random.default_rng(3)
    inputs = [[(rng.standard_normal(d) * 10.0 ** rng.integers(-4, 5, size=d)) for _ in range(world)] for _ in range(3)]
    try:
        counted: dict[int, list[dict[str, int]]] = {}
        for rounds in (1, 3):
            before = [c.stats.as_dict() for c in channels]
            results = run_world(channels, inputs[:rounds], unique_name("packed"))
            counted[rounds] = [
                {k: c.stats.as_dict()[k] - b[k] for k in ("puts", "gets")}
                for c, b in zip(channels, before, strict=True)
            ]
        for rank in range(world):
            puts = (counted[3][rank]["puts"] - counted[1][rank]["puts"]) / 2
            assert puts == 2, f"rank {rank} put {puts} values a round"
            # Its pieces and the merged chunks each round, and polls that missed (they vary: no difference).
            assert counted[3][rank]["gets"] >= 3 * 2 * (world - 1)
        header = len(codec.encode(np.zeros(0))) + seal.OVERHEAD
        model = pattern_requests("scatter_reduce", world, d * 8 / world + header, packed=packs_pieces("s3"))
        assert model.puts / world == 2 and model.gets / world == 2 * (world - 1)

        for channel in channels:  # the flat layout: W puts a worker
            channel.ranged_reads = False  # type: ignore[misc]
        flat = run_world(channels, inputs, unique_name("flat"))
        for i, xs in enumerate(inputs):
            expected = xs[0].copy()
            for x in xs[1:]:
                expected += x
            for rank in range(world):
                packed_sum, flat_sum = results[rank][i], flat[rank][i]
                assert isinstance(packed_sum, np.ndarray) and np.array_equal(packed_sum, expected)
                assert isinstance(flat_sum, np.ndarray) and np.array_equal(flat_sum, expected)
    finally:
        for channel in channels:
            channel.close()


def _tamper_with_rank_1s_packed_value(channel: Channel, tamper: Callable[[bytes], bytes]) -> None:
    """Where rank 1 writes its packed pieces of round 1, the store gets ``tamper`` of them."""
    put_many = channel.put_many

    def tampering(items: Sequence[tuple[str, Value]]) -> list[str]:
        out: list[tuple[str, Value]] = []
        for key, data in items:
            parsed = keys.parse_comm_key(key)
            if parsed.tag == "sr" and parsed.rank == 1 and parsed.chunk is None and parsed.round == 1:
                data = tamper(joined(data))
            out.append((key, data))
        return put_many(out)

    channel.put_many = tampering  # type: ignore[method-assign]


def _swap_the_first_two_pieces(packed: bytes) -> bytes:
    (a0, a1), (b0, b1) = codec.decode_packed_index(packed[: codec.packed_index_bytes(WORKERS - 1)], WORKERS - 1)[:2]
    assert a1 - a0 == b1 - b0
    return packed[:a0] + packed[b0:b1] + packed[a1:b0] + packed[a0:a1] + packed[b1:]


@pytest.mark.parametrize(
    ("tamper", "victim", "refusal"),
    [
        (_swap_the_first_two_pieces, 0, "written under another key"),  # chunk 2's piece where chunk 0's lies
        (lambda packed: packed[:-100], 3, "runs past the end"),  # the last piece cut short
    ],
    ids=["swapped", "truncated"],
)
def test_a_misplaced_or_truncated_piece_of_a_packed_value_is_refused(
    services: Services, tamper: Callable[[bytes], bytes], victim: int, refusal: str
) -> None:
    spec = channel_spec("s3", services)
    channels = [open_channel(spec) for _ in range(WORKERS)]
    channels[0].ensure()
    _tamper_with_rank_1s_packed_value(channels[1], tamper)
    rng = np.random.default_rng(5)
    inputs = [[rng.standard_normal(400) for _ in range(WORKERS)] for _ in range(2)]
    job_id = unique_name("tampered")
    try:
        results = run_world(channels, inputs, job_id, timeout_s=3.0)
    finally:
        for channel in channels:
            channel.close()
    error = results[victim][0]
    assert isinstance(error, LambdaMLError), error
    piece = keys.comm_key(job_id, 1, "sr", rank=1, chunk=victim)
    packed = keys.comm_key(job_id, 1, "sr", rank=1)
    assert refusal in str(error) and (piece in str(error) or packed in str(error)), error


TRIO = ("scatter_reduce", "allreduce", "scatter_reduce_2d")  # at W = 4 the grid is 2 x 2


@pytest.mark.parametrize("kind", ["s3", "redis", "memcached"])
def test_a_pattern_trial_sums_every_round_and_every_rank_keeps_the_same_pattern(services: Services, kind: str) -> None:
    """The first rounds take turns among the contenders, each rank times them, and all keep the
    pattern their records agree on; a rank resumed after the trial reads the same verdict."""
    spec = channel_spec(kind, services)
    channels = [open_channel(spec) for _ in range(WORKERS + 1)]
    channels[0].ensure()
    job_id = unique_name("trial")
    rng = np.random.default_rng(13)

    def trial() -> PatternTrial:
        return PatternTrial(TRIO, start=0, rounds=2)

    rounds = trial().end + 2
    inputs = [[rng.standard_normal(D) for _ in range(WORKERS)] for _ in range(rounds)]
    comms = [
        ChannelCommunicator(channels[r], job_id, r, WORKERS, pattern=TRIO[0], timeout_s=60.0, trial=trial())
        for r in range(WORKERS)
    ]
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            per_rank = list(pool.map(lambda r: [comms[r].allreduce(xs[r]) for xs in inputs], range(WORKERS)))
        for i, xs in enumerate(inputs):
            expected = xs[0] + xs[1] + xs[2] + xs[3]
            grid = trial().pattern_at(i) == "scatter_reduce_2d" if i < trial().end else None
            for rank in range(WORKERS):
                assert np.array_equal(per_rank[rank][i], per_rank[0][i]), f"rank {rank} round {i}"
                if grid is False:  # the flat patterns sum in rank order
                    assert np.array_equal(per_rank[rank][i], expected), f"rank {rank} round {i}"
                np.testing.assert_allclose(per_rank[rank][i], expected, rtol=1e-12, atol=1e-12)
        kept = {c.pattern_name for c in comms}
        assert len(kept) == 1 and kept <= set(TRIO)
        timed = comms[0].trial_round_s
        assert timed is not None and set(timed) == set(TRIO) and all(s > 0 for s in timed.values())
        assert all(c.trial_round_s == timed for c in comms)
        # The verdict of the stored records: the fastest, or a pattern before it in the model's
        # order that its rounds' spread cannot tell from it.
        names = {r: keys.trial_key(job_id, r, comms[0].attempt) for r in range(WORKERS)}
        stored = comms[0].channel.get_many(list(names.values()))
        assert trial().decide({r: stored[key] for r, key in names.items()}) == (comms[0].pattern_name, timed)
        fastest = min(TRIO, key=lambda p: (timed[p], TRIO.index(p)))
        assert TRIO.index(comms[0].pattern_name) <= TRIO.index(fastest)

        # Rank 2 again, resumed past the trial with none of its timings: it keeps its stored record.
        resumed = ChannelCommunicator(
            channels[WORKERS], job_id, 2, WORKERS, pattern=TRIO[0], timeout_s=60.0, first_round=rounds, trial=trial()
        )
        resumed.conclude_trial()
        assert (resumed.pattern_name, resumed.trial_round_s) == (comms[0].pattern_name, timed)
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(lambda comm: comm.finish(), comms))
        assert channels[0].list(keys.comm_prefix(job_id)) == [], "the trial's records outlived the job"
    finally:
        for channel in channels:
            channel.close()
