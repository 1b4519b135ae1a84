"""The cost model predicts every algorithm, compression and protocol a job file accepts, refuses
what the job file refuses in the same words, and counts the bytes the real code puts on the wire."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import get_args

import numpy as np
import pytest

from analytic_model import Workload, aws_profile, predict_faas, predict_iaas
from analytic_model.collectives import pattern_requests
from analytic_model.exchanges import communication, ring_degree, ring_exchange
from analytic_model.prediction import Infeasible
from analytic_model.transfers import Polling
from analytic_model.wire import Compression, update_bytes
from analytic_model.workload import schedule
from lambdaml import catalogue, codec, seal
from lambdaml.channels.memory import MemoryChannel
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.compressed import CompressedAllreduce
from lambdaml.comm.ring import RingExchange, ring_neighbours
from lambdaml.compression.compressors import QSGD, Identity, MinMaxUint8, OneBit, TopK
from lambdaml.config import SyncSpec, parse_job
from lambdaml.errors import ConfigError
from lambdaml.sync.asp import encode_update
from tests.unit.test_analytic_model import RangedMemoryView
from tests.unit.test_patterns import MemoryView

COMPRESSORS = {
    "identity": Identity(),
    "onebit": OneBit(),
    "qsgd": QSGD(16),
    "uint8": MinMaxUint8(),
    "topk": TopK(0.01),
}


def accepted() -> list[tuple[str, str | None, str]]:
    """Every (algorithm, compression, protocol) a job file accepts (None: no compression given)."""
    combos = []
    for name, info in catalogue.ALGORITHMS.items():
        compressions: list[str | None] = [None]
        if info.compression != "none":
            compressions += list(catalogue.COMPRESSORS)
        for compression in compressions:
            protocols = catalogue.PROTOCOLS if info.supports_async and compression is None else ("bsp",)
            combos += [(name, compression, protocol) for protocol in protocols]
    return combos


def workload(algorithm: str, compression: str | None = None, protocol: str = "bsp", **changes: object) -> Workload:
    model = "kmeans" if algorithm == "kmeans" else "lr"
    fields: dict[str, object] = {"dataset_bytes": 1e7, "samples": 100_000, "features": 1000, "epochs": 2, **changes}
    return Workload(model, algorithm=algorithm, compression=compression, protocol=protocol, **fields)  # type: ignore[arg-type]


def job(
    algorithm: str, compression: str | None, protocol: str, error_feedback: bool | None = None
) -> dict[str, object]:
    spec: dict[str, object] = {"name": algorithm}
    if compression is not None:
        spec["compression"] = {"name": compression, "error_feedback": error_feedback}
    return {
        "dataset": "d",
        "model": {"name": "kmeans" if algorithm == "kmeans" else "lr"},
        "algorithm": spec,
        "sync": {"protocol": protocol},
    }


def test_the_enumeration_is_what_the_job_file_accepts() -> None:
    combos = accepted()
    assert {a for a, _, _ in combos} == set(catalogue.ALGORITHMS)
    assert len(combos) > 40
    for algorithm, compression, protocol in combos:
        parse_job(job(algorithm, compression, protocol))  # raises if the job file refuses it


@pytest.mark.parametrize(("algorithm", "compression", "protocol"), accepted())
def test_every_accepted_combination_gets_a_finite_positive_prediction(
    algorithm: str, compression: str | None, protocol: str
) -> None:
    profile = aws_profile()
    work = workload(algorithm, compression, protocol)
    for channel in ("s3", "redis"):
        for pattern in ("allreduce", "scatter_reduce"):
            for workers in (1, 2, 5):
                p = predict_faas(work, workers, channel, pattern, 3008, profile)
                for value in (p.time_s, p.cost, p.round_s if workers > 1 else 1.0):
                    assert math.isfinite(value) and value > 0, (channel, pattern, workers, value)
                assert all(math.isfinite(v) and v >= 0 for v in p.time.values())
                if workers > 1:
                    assert p.time["communicate_s"] > 0 and p.requests["bytes_sent"] > 0
    for workers in (1, 4):
        if work.decentralized or protocol != "bsp":  # the iaas backends run BSP over gloo only
            with pytest.raises(Infeasible, match="the iaas backends run BSP collectives over gloo only") as caught:
                predict_iaas(work, workers, "c5.4xlarge", profile)
            assert "\n" not in str(caught.value)
        else:
            p = predict_iaas(work, workers, "c5.4xlarge", profile)
            assert math.isfinite(p.time_s) and p.time_s > 0 and math.isfinite(p.cost) and p.cost > 0


def test_the_model_refuses_what_the_job_file_refuses_in_the_same_words() -> None:
    profile = aws_profile()
    checked = refused = 0
    for algorithm in catalogue.ALGORITHMS:
        for compression in (None, *catalogue.COMPRESSORS):
            for protocol in catalogue.PROTOCOLS:
                for error_feedback in (None, True, False):
                    if compression is None and error_feedback is not None:
                        continue
                    try:
                        parse_job(job(algorithm, compression, protocol, error_feedback))
                        expected = None
                    except ConfigError as exc:
                        expected = str(exc)
                    work = workload(algorithm, compression, protocol, error_feedback=error_feedback)
                    try:
                        work.check(profile)
                        got = None
                    except ConfigError as exc:
                        got = str(exc)
                    checked += 1
                    if expected is None:
                        assert got is None, (algorithm, compression, protocol, got)
                    else:
                        refused += 1
                        assert got is not None and got in expected, (expected, got)
    assert checked > 100 and refused > 50
    assert get_args(SyncSpec.model_fields["protocol"].annotation) == catalogue.PROTOCOLS


def test_compressed_values_on_the_wire_are_the_size_the_model_says() -> None:
    sealer = seal.Sealer()
    rng = np.random.default_rng(0)
    for name, compressor in COMPRESSORS.items():
        model = Compression(name, levels=16, ratio=0.01)
        for dtype in (np.float64, np.float32):
            for n in (0, 1, 7, 8, 9, 250, 1001, 100_000):
                x = rng.standard_normal(n).astype(dtype)
                payload = compressor.compress(x, np.random.default_rng(1))
                real = sealer.seal("k", codec.encode_bundle(payload))
                assert model.value_bytes(n, np.dtype(dtype).itemsize) == len(real), (name, dtype, n)
                extras = np.array([3.0, 1.5], dtype=dtype)
                with_extras = sealer.seal("k", codec.encode_bundle({**payload, "exact": extras}))
                assert model.value_bytes(n, np.dtype(dtype).itemsize, extras=2) == len(with_extras)
    for levels in (1, 3, 255, 32767):  # qsgd's width follows its levels
        x = rng.standard_normal(999)
        real = sealer.seal("k", codec.encode_bundle(QSGD(levels).compress(x, rng)))
        assert Compression("qsgd", levels=levels).value_bytes(999, 8) == len(real)
    for n in (0, 5, 1000):
        assert update_bytes(n, 8) == len(sealer.seal("k", encode_update(3, np.zeros(n))))


@pytest.mark.parametrize(
    ("compression", "factor"),
    [("onebit", 1 / 64), ("qsgd", 6 / 64), ("uint8", 8 / 64), ("topk", 0.01 * 12 / 8), ("identity", 1.0)],
)
def test_compressed_rounds_send_fewer_bytes_by_the_compressors_factor(compression: str, factor: float) -> None:
    profile = aws_profile()
    big = workload("ga_sgd", features=1_000_000)
    plain = predict_faas(big, 4, "redis", "allreduce", 3008, profile)
    squeezed = predict_faas(replace_compression(big, compression), 4, "redis", "allreduce", 3008, profile)
    for what in ("bytes_sent", "bytes_received"):
        assert squeezed.requests[what] / plain.requests[what] == pytest.approx(factor, rel=0.01)
    assert squeezed.requests["puts"] == plain.requests["puts"]  # the same requests, smaller values


def replace_compression(work: Workload, compression: str) -> Workload:
    from dataclasses import replace

    return replace(work, compression=compression)


def test_one_bit_adam_is_uncompressed_in_its_warm_up_then_one_bit() -> None:
    profile = aws_profile()
    adam = workload("onebit_adam", optimizer="adam", features=100_000)
    rounds = schedule(adam, 4).rounds
    warm = predict_faas(replace_warmup(adam, int(rounds)), 4, "redis", "scatter_reduce", 3008, profile)
    exact = predict_faas(
        workload("ga_sgd", optimizer="adam", features=100_000), 4, "redis", "scatter_reduce", 3008, profile
    )
    assert warm.requests["bytes_sent"] == pytest.approx(exact.requests["bytes_sent"])
    onebit = predict_faas(workload("ga_sgd", "onebit", features=100_000), 4, "redis", "scatter_reduce", 3008, profile)
    half = predict_faas(replace_warmup(adam, int(rounds // 2)), 4, "redis", "scatter_reduce", 3008, profile)
    middle = (exact.requests["bytes_sent"] + onebit.requests["bytes_sent"]) / 2
    assert half.requests["bytes_sent"] == pytest.approx(middle, rel=0.01)
    assert onebit.requests["bytes_sent"] < half.requests["bytes_sent"] < exact.requests["bytes_sent"] / 1.9


def replace_warmup(work: Workload, steps: int) -> Workload:
    from dataclasses import replace

    return replace(work, warmup_steps=steps)


def test_ring_requests_per_worker_do_not_grow_with_w() -> None:
    profile = aws_profile()
    message = Compression("onebit").value_bytes(100_000, 8)
    for kind in ("s3", "redis"):
        channel = profile.channel(kind)
        for w in (3, 10, 50, 100):
            exchange = ring_exchange(channel, w, message, Polling.of(profile, kind)).requests
            assert ring_degree(w) == len(ring_neighbours(0, w)) == 2
            assert exchange.puts == w and exchange.deletes == w  # its message; the batch delete of the last
            # Its two neighbours', and the polls that missed them: those wait for the slower neighbour, not for W.
            assert 2 * w <= exchange.gets <= 4 * w
            assert exchange.bytes_sent == w * message and exchange.bytes_received == 2 * w * message
    assert ring_degree(2) == len(ring_neighbours(0, 2)) == 1 and ring_degree(1) == 0
    # The whole run's requests per worker and round stay flat too (the epoch's loss sum and the
    # final average are spread over the rounds), where a collective's grow with W.
    work = workload("choco_sgd", "onebit", samples=10_000_000)
    ring = {w: predict_faas(work, w, "redis", "allreduce", 3008, profile).requests["puts"] / w for w in (3, 100)}
    assert ring[100] == pytest.approx(ring[3], rel=0.01)
    ga = predict_faas(workload("ga_sgd", samples=10_000_000), 100, "redis", "scatter_reduce", 3008, profile)
    assert ga.requests["puts"] / 100 > 50 * ring[100]


def test_the_ring_waits_by_its_own_calibrated_figures_where_a_profile_has_them() -> None:
    from dataclasses import replace

    polling = Polling.of(aws_profile(), "redis")
    redis = aws_profile().channel("redis")
    message = Compression("onebit").value_bytes(28, 8)
    ring = replace(redis, ring_wait_s=0.004, ring_wait_per_worker_s=0.002)
    assert ring.straggle(2, "ring") == 0.004 and ring.straggle(3, "ring") == 0.006
    assert ring.straggle(2) == redis.straggle(2)  # the collectives keep theirs
    for w in (2, 4, 10):
        calibrated, uncalibrated = (ring_exchange(c, w, message, polling) for c in (ring, redis))
        # A rank waits on at most two neighbours: from W = 3 on, the loss stops growing.
        assert calibrated.phases["late_neighbours"] >= (0.004 if w == 2 else 0.006)
        assert calibrated.seconds > uncalibrated.seconds


def test_asp_has_no_barrier_and_records_the_staleness_of_its_merges() -> None:
    profile = aws_profile()
    asp = workload("ga_sgd", protocol="asp")
    bsp = workload("ga_sgd")
    for w in (2, 10):
        p = predict_faas(asp, w, "s3", "allreduce", 3008, profile)
        assert p.staleness == w - 1
        assert p.requests["puts"] / w == pytest.approx(1 + 1 / 16)  # its update, its cursor every 16 pushes
        assert p.requests["gets"] / w == pytest.approx(2 * (w - 1) + 1 / 16)  # two numbers of every other writer
        # No barrier: a push never waits for the slowest worker's polling, as a BSP round does.
        assert p.round_s < predict_faas(bsp, w, "s3", "allreduce", 3008, profile).round_s
    assert predict_faas(bsp, 10, "s3", "allreduce", 3008, profile).staleness is None
    ssp0 = predict_faas(workload("ga_sgd", protocol="ssp", staleness=0), 10, "s3", "allreduce", 3008, profile)
    ssp4 = predict_faas(workload("ga_sgd", protocol="ssp", staleness=4), 10, "s3", "allreduce", 3008, profile)
    assert ssp0.round_s > ssp4.round_s  # staleness 0 waits for every other worker's push
    with pytest.raises(ConfigError, match="unknown pattern 'ring'; known: allreduce"):
        predict_faas(asp, 4, "s3", "ring", 3008, profile)  # no collective, still a checked pattern


def _world(world: int, job: str) -> tuple[list[MemoryView], list[ChannelCommunicator]]:
    store = MemoryChannel()
    views = [MemoryView(store) for _ in range(world)]
    comms = [ChannelCommunicator(views[r], job, r, world, pattern="allreduce", timeout_s=20.0) for r in range(world)]
    return views, comms


def _counts(views: list[MemoryView]) -> dict[str, float]:
    """Puts, gets that found a value, and bytes, over all workers."""
    return {
        "puts": sum(v.stats.puts for v in views),
        "hits": sum(v.hits for v in views),
        "bytes_sent": sum(v.stats.bytes_sent for v in views),
        "bytes_received": sum(v.stats.bytes_received for v in views),
    }


def _compressed_rounds(
    world: int, n: int, pattern: str, name: str, rounds: int, *, packed: bool = False
) -> dict[str, float]:
    """The counts of ``rounds`` real compressed allreduces with extras (as EF-SGD sends them) on W
    threads; ``packed``: over a channel that reads ranges natively, as S3."""
    rng = np.random.default_rng(2)
    store = MemoryChannel()
    views = [(RangedMemoryView if packed else MemoryView)(store) for _ in range(world)]
    comms = [ChannelCommunicator(views[r], f"c{rounds}", r, world, pattern=pattern) for r in range(world)]
    scatter = pattern != "allreduce"
    reducers = [
        CompressedAllreduce(COMPRESSORS[name], rank=r, world=world, scatter=scatter, error_feedback=True)
        for r in range(world)
    ]
    inputs = [[rng.standard_normal(n) for _ in range(world)] for _ in range(rounds)]

    def worker(rank: int) -> None:
        for xs in inputs:
            reducers[rank].allreduce(comms[rank], xs[rank], np.array([100.0, 0.5]))
        comms[rank].finish()

    with ThreadPoolExecutor(world) as pool:
        list(pool.map(worker, range(world)))
    return _counts(views)


@pytest.mark.parametrize(
    ("pattern", "packed"), [("allreduce", False), ("scatter_reduce", False), ("scatter_reduce", True)]
)
@pytest.mark.parametrize("name", ["onebit", "qsgd", "topk", "uint8"])
def test_a_real_compressed_allreduce_moves_the_bytes_the_model_counts(pattern: str, packed: bool, name: str) -> None:
    world, n = 3, 1000
    one, three = (_compressed_rounds(world, n, pattern, name, rounds, packed=packed) for rounds in (1, 3))
    real = {k: (three[k] - one[k]) / 2 for k in one}
    work = Workload("lr", 1e6, 3000, features=n - 1, compression=name, levels=16, ratio=0.01)
    profile = aws_profile()
    info = work.check(profile)
    model = communication(
        work, info, profile.channel("s3" if packed else "redis"), pattern, world, schedule(work, world), 2e9,
        Polling.of(profile, "s3" if packed else "redis"), profile.codec_header_bytes,
    ).requests  # fmt: skip
    assert real["puts"] == model.puts
    # Packed, every piece is one ranged read: its length is known, so no packed value's index is read first.
    assert real["hits"] == pattern_requests(pattern, world, 0.0, packed=packed).gets  # beyond: polling misses
    assert model.gets >= real["hits"]
    assert real["bytes_sent"] == pytest.approx(model.bytes_sent, abs=8 * world)
    assert real["bytes_received"] == pytest.approx(model.bytes_received, rel=0.02)


def _ring_rounds(world: int, n: int, rounds: int) -> dict[str, float]:
    """The counts of ``rounds`` real 1-bit ring exchanges on W threads."""
    views, comms = _world(world, f"ring{rounds}")
    rings = [RingExchange(c) for c in comms]
    barrier = threading.Barrier(world)

    def worker(rank: int) -> None:
        for t in range(rounds):
            rings[rank].exchange(OneBit().compress(np.full(n, float(rank + t))))
        barrier.wait(timeout=20)
        comms[rank].finish()

    with ThreadPoolExecutor(world) as pool:
        list(pool.map(worker, range(world)))
    return _counts(views)


@pytest.mark.parametrize("world", [2, 3, 5])
def test_a_real_ring_exchange_moves_the_requests_and_bytes_the_model_counts(world: int) -> None:
    n = 500
    one, three = (_ring_rounds(world, n, rounds) for rounds in (1, 3))
    real = {k: (three[k] - one[k]) / 2 for k in one}
    message = Compression("onebit").value_bytes(n, 8)
    k = ring_degree(world)
    assert real["puts"] == world  # one message per worker, whatever W
    assert real["hits"] == world * k
    assert real["bytes_sent"] == world * message
    assert real["bytes_received"] == world * k * message
