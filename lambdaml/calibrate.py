"""Measure a target for the analytic model: channels, compute, start-up and loading.

``lambdaml calibrate`` runs this on the local machine (starting moto, Redis and Memcached
on loopback ports, or using given endpoints) or against a stack's resources, and writes a
profile that ``analytic_model.load_profile`` lays over the AWS defaults.

What is measured, each through the same code the workers run:

- per channel: the latency of one small put and get (encode and decode included) and the
  share of it that is the caller's CPU, the cost of each further value in one
  ``put_many``/``get_many``, the bandwidth of large values; with several processes
  hammering the channel at once, what the store (or the shared machine) sustains per
  request and per byte; with 2 and 4 processes running a small gradient step and the real
  AllReduce, then ScatterReduce, what a wait loses in each pattern and how much slower the
  step after a wait is; with them exchanging large values, how much they crowd each
  other, and with them running each pattern on large values, how much slower its bytes
  move in real rounds; the CPU and wall time of a worker's batch delete;
- per model: the time of one worker step at two batch sizes, giving the time per sample
  and per step on one core;
- the worker processes' start-up (spawn and imports), the summing rate, and loading a
  shard from S3.

On a local target all worker processes share this machine's cores; the profile records
how many (``faas.shared_cores``), so predictions for W workers on 2 cores are honest.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing as mp
import os
import platform
import queue
import secrets
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from lambdaml import codec, keys
from lambdaml.channels import Channel, open_channel
from lambdaml.config import AlgorithmSpec, ChannelSpec, ModelSpec, StorageSpec
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.runtime.heap import keep_freed_buffers
from lambdaml.seal import new_secret

log = logging.getLogger(__name__)

KINDS = ("s3", "redis", "memcached", "dynamodb")
SMALL_FLOATS = 8  # a small value: 8 float64 (96 bytes on the wire)
BATCH = 8  # values per put_many / get_many when measuring the extra cost of each
PROBE_TIMEOUT_S = 120.0
_SATURATION_KEYS = 8  # keys per load process, written in turn
_IMAGE_MODELS = {"mobilenet", "resnet18"}  # CIFAR-10 shaped probes


@dataclass(frozen=True)
class ComputeProbe:
    """One model to time: its name, width, density and the batch size the job will use."""

    model: str = "lr"
    features: int = 28
    sparse: bool = False
    batch_size: int = 100
    rows: int = 4000


@dataclass(frozen=True)
class Effort:
    """How long to measure: ``quick`` for tests, the default for a profile you keep."""

    repeats: int = 15
    saturation_s: float = 1.0
    large_bytes: int = 2_000_000
    processes: int = 4
    rounds_s: float = 0.5  # at least this long in the small-value exchange probes (their rounds take ~1 ms)

    @classmethod
    def quick(cls) -> Effort:
        return cls(repeats=5, saturation_s=0.3, large_bytes=1_000_000, processes=2, rounds_s=0.1)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _value(n_floats: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n_floats)


# ---- channels -------------------------------------------------------------------------------


def _sizes(channel: Channel, largest: int) -> list[int]:
    """Float counts of the values timed: one small, three large that each stay one item.

    Chunking has its own term in the model, so no measured value is chunked.
    """
    limit = channel.max_item_bytes
    top = min(largest, int(limit * 0.9)) if limit else largest
    return [SMALL_FLOATS] + [max(SMALL_FLOATS + 1, top // 8 // d) for d in (16, 4, 1)]


def _fit_slope(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares seconds per byte through the measured sizes (never zero: a bandwidth is finite)."""
    return max(statistics.linear_regression(sizes, seconds).slope, 1e-12)


def measure_channel(channel: Channel, effort: Effort) -> dict[str, float]:
    """One worker's view of a channel: latency, the extra cost per batched value, bandwidth.

    Sizes are measured round-robin, so a burst of load elsewhere hits all of them alike;
    every put goes to a fresh key, as the patterns' writes do.
    """
    job = f"calibrate-{secrets.token_hex(3)}"
    values = [_value(n, seed=i) for i, n in enumerate(_sizes(channel, effort.large_bytes))]
    small = values[0]
    wire = [len(codec.encode(v)) for v in values]
    counter = iter(range(10**9))

    def key(rank: int = 0) -> str:
        return keys.comm_key(job, next(counter), "cal", rank=rank)

    puts: list[list[float]] = [[] for _ in values]
    gets: list[list[float]] = [[] for _ in values]
    cpu = {"put": 0.0, "get": 0.0}  # this process's CPU seconds (all threads) in the single calls
    wall = {"put": 0.0, "get": 0.0}
    many_puts: list[float] = []
    many_gets: list[float] = []
    try:
        for repeat in range(effort.repeats + 1):  # the first pass warms the connections up
            for i, value in enumerate(values):
                k = key()
                started, cpu_started = time.perf_counter(), time.process_time()
                channel.put(k, codec.encode(value))
                put_s, put_cpu = time.perf_counter() - started, time.process_time() - cpu_started
                started, cpu_started = time.perf_counter(), time.process_time()
                codec.decode(channel.get(k), dtype=value.dtype, shape=value.shape)
                get_s, get_cpu = time.perf_counter() - started, time.process_time() - cpu_started
                if repeat:
                    puts[i].append(put_s)
                    gets[i].append(get_s)
                    for op, seconds, cpu_s in (("put", put_s, put_cpu), ("get", get_s, get_cpu)):
                        wall[op] += seconds
                        cpu[op] += cpu_s
            batch = [key(rank) for rank in range(BATCH)]
            started = time.perf_counter()
            channel.put_many([(k, codec.encode(small)) for k in batch])
            put_s = time.perf_counter() - started
            started = time.perf_counter()
            for raw in channel.get_many(batch).values():
                codec.decode(raw, dtype=small.dtype, shape=small.shape)
            if repeat:
                many_puts.append(put_s)
                many_gets.append(time.perf_counter() - started)
    finally:
        channel.clear(keys.comm_prefix(job))
    put_medians = [statistics.median(t) for t in puts]
    get_medians = [statistics.median(t) for t in gets]
    latency_put, latency_get = put_medians[0], get_medians[0]
    return {
        "latency_put_s": latency_put,
        "latency_get_s": latency_get,
        "extra_put_s": max(statistics.median(many_puts) - latency_put, 0.0) / (BATCH - 1),
        "extra_get_s": max(statistics.median(many_gets) - latency_get, 0.0) / (BATCH - 1),
        "bandwidth_put_Bps": 1.0 / _fit_slope(wire, put_medians),
        "bandwidth_get_Bps": 1.0 / _fit_slope(wire, get_medians),
        # On cores the workers share, this part of a call waits for a core when they outnumber them.
        "cpu_share_put": min(cpu["put"] / wall["put"], 1.0),
        "cpu_share_get": min(cpu["get"] / wall["get"], 1.0),
    }


def _saturate(
    spec_data: dict[str, Any], index: int, seconds: float, large_floats: int, barrier: Any, results: Any
) -> None:
    """One of several processes hammering a channel: count small puts, small gets, large puts, large gets."""
    try:
        keep_freed_buffers()  # as a worker's process does
        channel = open_channel(ChannelSpec(**spec_data))
        job = f"calibrate-sat-{spec_data['kind']}"
        counts: dict[str, int] = {}
        for label, value in (("small", _value(SMALL_FLOATS)), ("large", _value(large_floats))):
            data = codec.encode(value)
            # A ring of keys, each written and later overwritten: new keys as the patterns write
            # them, in bounded memory (a cache that fills up would evict a running job's values).
            ring = [keys.comm_key(job, i, label, rank=index) for i in range(_SATURATION_KEYS)]
            puts = gets = 0
            barrier.wait(PROBE_TIMEOUT_S)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline or puts < len(ring):
                channel.put(ring[puts % len(ring)], codec.encode(value))
                puts += 1
            counts[f"{label}_puts"] = puts
            recent = ring
            barrier.wait(PROBE_TIMEOUT_S)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                codec.decode(channel.get(recent[gets % len(recent)]), dtype=value.dtype, shape=value.shape)
                gets += 1
            counts[f"{label}_gets"] = gets
            counts[f"{label}_bytes"] = len(data)
        channel.close()
        results.put((index, counts, None))
    except Exception as exc:  # reported to the parent as one line
        results.put((index, {}, f"{type(exc).__name__}: {exc}"))


def _run_all(procs: Sequence[Any], results: Any, what: str, timeout_s: float) -> list[Any]:
    """Start the processes and collect one report from each; a process that dies silently fails at once."""
    for proc in procs:
        proc.start()
    reports: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(reports) < len(procs):
            try:
                reports.append(results.get(timeout=0.5))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise LambdaMLError(f"{what}: the probe processes did not report within {timeout_s:g}s") from None
                if sum(not p.is_alive() for p in procs) > len(reports) and results.empty():
                    time.sleep(0.5)  # a report may still be in the pipe
                    if results.empty():
                        raise LambdaMLError(f"{what}: a probe process exited without a report") from None
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
    return reports


def measure_store(spec: ChannelSpec, effort: Effort, large_floats: int, n: int) -> dict[str, float | None]:
    """What the store, or the machine every process shares, sustains with ``n`` workers at once."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    spec_data = spec.model_dump()
    workers = [
        ctx.Process(target=_saturate, args=(spec_data, i, effort.saturation_s, large_floats, barrier, results))
        for i in range(n)
    ]
    reports = _run_all(workers, results, f"calibrating {spec.kind}", PROBE_TIMEOUT_S + 4 * effort.saturation_s)
    failed = [error for _, _, error in reports if error]
    if failed:
        raise LambdaMLError(f"calibrating {spec.kind}: {failed[0]}")
    total = {name: sum(counts[name] for _, counts, _ in reports) for name in reports[0][1]}
    with open_channel(spec) as channel:
        channel.clear(keys.comm_prefix(f"calibrate-sat-{spec.kind}"))
    seconds = effort.saturation_s
    figures: dict[str, float | None] = {}
    for op in ("put", "get"):
        per_request = seconds / max(total[f"small_{op}s"], 1)
        count = total[f"large_{op}s"]
        byte_time = seconds - count * per_request
        moved = count * total["large_bytes"]
        figures[f"server_{op}_s"] = per_request
        # Too few large requests to tell bytes from requests apart: no separate byte limit.
        figures[f"server_{op}_Bps"] = moved / byte_time if byte_time > 0.1 * seconds and count >= n else None
    return figures


# ---- compute, start-up, loading ---------------------------------------------------------------


def _probe_data(probe: ComputeProbe) -> tuple[Any, np.ndarray, dict[str, Any]]:
    from lambdaml.data import synthetic

    if probe.model in _IMAGE_MODELS:
        rng = np.random.default_rng(0)
        X = rng.random((probe.rows, 3 * 32 * 32), dtype=np.float32)
        y = rng.integers(0, 10, probe.rows).astype(np.float32)
        return X, y, {"n_features": 3072, "n_classes": 10, "sample_shape": [3, 32, 32]}
    if probe.sparse:
        Xs, y, _ = synthetic.rcv1_like(probe.rows, features=probe.features)
        return Xs, y, {"n_features": probe.features, "format": "csr"}
    X, y, _ = synthetic.higgs_like(probe.rows, features=probe.features)
    if probe.model == "mlp":
        y = (np.arange(probe.rows) % 10).astype(np.float32)
        return X, y, {"n_features": probe.features, "n_classes": 10}
    return X, y, {"n_features": probe.features}


def measure_compute(probe: ComputeProbe) -> tuple[str, dict[str, Any]]:
    """Time one worker step at two batch sizes: the algorithm's own step (GA-SGD's, or
    k-means' for its model) through a one-worker communicator, so the batch gather, the loss
    and gradient, the vector's packing, finite check and copy around its collective, and the
    optimizer update are all in it."""
    from analytic_model.profile import aws_profile, compute_key
    from lambdaml.algorithms import reify
    from lambdaml.comm.channel import ChannelCommunicator
    from lambdaml.data.shards import Manifest
    from lambdaml.models import MODELS

    if probe.batch_size < 2 or probe.rows < probe.batch_size:
        raise ConfigError(f"calibrating {probe.model}: need a batch size of at least 2 and rows >= batch size")
    X, y, shape = _probe_data(probe)
    manifest = Manifest(  # the model's shape; nothing is read from a store
        name="calibrate",
        shard_rows=[probe.rows],
        test_rows=0,
        created=0.0,
        dataset_version="calibrate",
        shard_bytes=[0],
        shard_hashes=[""],
        **shape,
    )
    model = MODELS.get(probe.model).build(ModelSpec(name=probe.model), manifest)
    params = model.init_params(0)
    if probe.model == "kmeans":
        params = np.asarray(X[: model.n_params // probe.features], dtype=np.float64).reshape(-1).copy()
    order = np.random.default_rng(0).permutation(probe.rows)
    alone = ChannelCommunicator(open_channel(ChannelSpec(kind="memory")), "calibrate", 0, 1)
    algorithm = AlgorithmSpec(name="kmeans" if probe.model == "kmeans" else "ga_sgd", lr=1e-6)
    state = reify(algorithm, model, alone, params)
    state.on_start(X, y)

    def step_time(batch: int) -> float:
        steps = max(1, probe.rows // batch)
        position = iter(range(10**9))

        def step() -> None:
            i = next(position) % steps
            rows = order[i * batch : (i + 1) * batch]
            state.step(X[rows], y[rows])

        step()  # warm-up (torch's first call allocates)
        repeats = max(5, min(200, int(0.3 / max(_median_time(step, 3), 1e-6))))
        return _median_time(step, repeats)

    small = max(1, probe.batch_size // 10)
    t_small, t_batch = step_time(small), step_time(probe.batch_size)
    per_sample = max(t_batch - t_small, 0.0) / (probe.batch_size - small)
    per_step = max(t_small - small * per_sample, 0.0)
    info = aws_profile().models.get(probe.model)
    # A sparse row's work is its nonzeros, not its width: no flop count to scale other models by.
    flops = info.flops(probe.features, 8, model.n_params) if info and not probe.sparse else 0.0
    return compute_key(probe.model, model.n_params, probe.sparse), {
        "per_sample_s": per_sample,
        "per_step_s": per_step,
        "flops_per_sample": flops,
        "kind": info.kind if info else "linear",
        "runtime": info.runtime if info else "numpy",
    }


def measure_add_Bps() -> float:
    """Bytes of one float64 vector summed into another per second (the reduce in every pattern)."""
    a, b = _value(1_000_000), _value(1_000_000, seed=1)
    return a.nbytes / _median_time(lambda: np.add(a, b, out=a), 9)


def _start_probe(sent: float, results: Any) -> None:
    """A worker process's start: what the local backend's workers import before their first step."""
    import lambdaml.channels.s3
    import lambdaml.runtime.worker  # noqa: F401

    results.put(time.time() - sent)


def measure_startup(processes: int) -> tuple[float, float]:
    """(one worker process's spawn-and-import time, extra seconds per further process started at once)."""
    ctx = mp.get_context("spawn")

    def start(n: int) -> float:
        results = ctx.Queue()
        sent = time.time()
        procs = [ctx.Process(target=_start_probe, args=(sent, results)) for _ in range(n)]
        return float(max(_run_all(procs, results, "calibrating start-up", PROBE_TIMEOUT_S)))

    one = statistics.median(start(1) for _ in range(2))
    many = start(processes)
    return one, max(many - one, 0.0) / max(processes - 1, 1)


def measure_load(store: Channel, effort: Effort) -> tuple[float, float]:
    """(bandwidth, latency) of downloading a shard from the data store."""
    prefix = keys.comm_prefix(f"calibrate-load-{secrets.token_hex(3)}")
    small_key, large_key = prefix + "small", prefix + "large"
    size = max(effort.large_bytes, 1_000_000) * 2
    store.put(small_key, b"x" * 64)
    store.put(large_key, os.urandom(size))
    try:
        latency = _median_time(lambda: store.get(small_key), effort.repeats)
        large = _median_time(lambda: store.get(large_key), max(3, effort.repeats // 3))
    finally:
        store.clear(prefix)
    return size / max(large - latency, 1e-6), latency


# ---- whole profiles ---------------------------------------------------------------------------


def measure_cleanup(channel: Channel, effort: Effort, keys_per_round: int = 4) -> tuple[float, float]:
    """(CPU seconds, wall seconds) this process spends deleting what it wrote in a finished
    round, as every rank does: one batch delete of known keys."""
    job = f"calibrate-clean-{secrets.token_hex(3)}"
    value = codec.encode(_value(SMALL_FLOATS))
    cpu, wall = [], []
    try:
        for round_ in range(effort.repeats):
            stored = channel.put_many(
                [(keys.comm_key(job, round_, "cal", rank=0, chunk=c), value) for c in range(keys_per_round)]
            )
            started, cpu_started = time.perf_counter(), time.process_time()
            channel.delete_stored(stored)
            cpu.append(time.process_time() - cpu_started)
            wall.append(time.perf_counter() - started)
    finally:
        channel.clear(keys.comm_prefix(job))
    return statistics.median(cpu), statistics.median(wall)


def _probe_step(floats: int) -> Callable[[], None]:
    """The compute a worker does between two collectives in the exchange probes: a small
    gradient step (logistic regression, 100 rows of 28 features) and, for a large value, what
    a step does to a model of its size (a fresh gradient, the regularizer, the update), so
    the collective's transfers run on the caches such a step leaves them."""
    rng = np.random.default_rng(0)
    X, y, w = rng.standard_normal((1000, 28)), (rng.random(1000) > 0.5).astype(np.float64), np.zeros(28)
    params = np.zeros(floats if floats > SMALL_FLOATS else 0)

    def step() -> None:
        rows = rng.integers(0, len(y), 100)
        batch = X[rows]
        w[:] -= 1e-3 * (batch.T @ (1.0 / (1.0 + np.exp(-(batch @ w))) - y[rows])) / len(rows)
        if params.size:
            grad = np.zeros_like(params)
            grad[rows] = w[0]
            params[:] -= 1e-3 * (grad / len(rows) + 1e-4 * params)

    return step


def _rounds(
    spec_data: dict[str, Any],
    job: str,
    secret: bytes | None,
    rank: int,
    world: int,
    floats: int,
    rounds: int,
    pattern: str | None,
    barrier: Any,
    results: Any,
) -> None:
    """One of ``world`` processes doing rounds: a small gradient step and the real collective of
    ``pattern``, or (None) putting one value and reading everyone else's (what every phase of
    the patterns amounts to). Reports the rounds' ends and, with a pattern, how much longer the
    step took between collectives than back to back."""
    from lambdaml.comm.channel import ChannelCommunicator

    try:
        keep_freed_buffers()  # as a worker's process does: rounds of large values churn no pages
        channel = open_channel(ChannelSpec(**spec_data))
        comm = ChannelCommunicator(
            channel, job, rank, world, pattern=pattern or "allreduce", timeout_s=PROBE_TIMEOUT_S, secret=secret
        )
        value = _value(floats, seed=rank)
        step = _probe_step(floats)
        alone = _median_time(step, 30) if pattern else 0.0
        ends, steps = [], []
        barrier.wait(PROBE_TIMEOUT_S)
        for round_ in range(rounds):
            if pattern:
                started = time.perf_counter()
                step()
                steps.append(time.perf_counter() - started)
                comm.allreduce(value)
            else:
                channel.put(keys.comm_key(job, round_, "x", rank=rank), codec.encode(value))
                others = [keys.comm_key(job, round_, "x", rank=r) for r in range(world) if r != rank]
                for raw in channel.wait_for(others, PROBE_TIMEOUT_S).values():
                    codec.decode(raw, dtype=value.dtype, shape=value.shape)
            ends.append(time.perf_counter())
        comm.finish()  # rank 0 waits for everyone, then clears the probe's keys
        channel.close()
        in_run = statistics.fmean(steps[2:]) if pattern else 0.0
        results.put((rank, (ends, in_run, alone), None))
    except Exception as exc:  # reported to the parent as one line
        results.put((rank, ([], 0.0, 0.0), f"{type(exc).__name__}: {exc}"))


@dataclass(frozen=True)
class ProbeRounds:
    round_s: float  # rank 0's mean round, after a warm-up
    step_s: float  # the mean gradient step between collectives, over the ranks
    step_alone_s: float  # the same step back to back in one process


def _mean_round(spec: ChannelSpec, world: int, floats: int, rounds: int, *, pattern: str | None) -> ProbeRounds:
    """The mean round of ``world`` processes doing ``_rounds``, and their gradient steps."""
    ctx = mp.get_context("spawn")
    job = f"calibrate-rounds-{secrets.token_hex(3)}"
    barrier = ctx.Barrier(world)
    results = ctx.Queue()
    # The values are sealed as a job's would be: authenticated where the job's channel would be.
    args = (spec.model_dump(), job, new_secret() if spec.authenticates_values else None)
    procs = [
        ctx.Process(target=_rounds, args=(*args, r, world, floats, rounds, pattern, barrier, results))
        for r in range(world)
    ]
    reports = _run_all(procs, results, f"calibrating rounds on {spec.kind}", PROBE_TIMEOUT_S)
    failed = [error for _, _, error in reports if error]
    if failed:
        raise LambdaMLError(f"calibrating rounds on {spec.kind}: {failed[0]}")
    ends = next(report[0] for rank, report, _ in reports if rank == 0)[2:]
    # The mean, not the median: a job's time is the sum of its rounds, slow ones included
    # (a round's time is skewed: now and then a worker waits for a core).
    return ProbeRounds(
        (ends[-1] - ends[0]) / (len(ends) - 1),
        statistics.fmean(report[1] for _, report, _ in reports),
        statistics.fmean(report[2] for _, report, _ in reports),
    )


def _solve_increasing(f: Callable[[float], float], target: float, high: float) -> float:
    """The x in [0, high] where a non-decreasing f reaches ``target`` (bisection).

    f may jump (a poll that misses adds whole requests): where it jumps over the target,
    the side of the jump nearer the target wins.
    """
    if f(0.0) >= target:
        return 0.0
    if f(high) < target:
        return high
    low = 0.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (low, mid) if f(mid) >= target else (mid, high)
    return low if target - f(low) < f(high) - target else high


def measure_exchange(spec: ChannelSpec, figures: dict[str, Any], effort: Effort, large_floats: int) -> dict[str, float]:
    """What W workers that exchange values lose beyond one worker's transfers, measured with W processes.

    With small values, W processes run the real AllReduce, then the real ScatterReduce, round
    after round: each pattern's wait loss (polling, stragglers and, on a shared machine,
    scheduling; on a store that serves one request at a time, how the workers' requests
    interleave) is the figure that makes the model's round equal the measured one, at 2 and
    at ``effort.processes`` workers. With
    large values, each process puts one value and reads the others' (what every phase of
    the patterns amounts to): what the bytes cost beyond one worker's transfers is crowding,
    workers that move bytes at once slowing each other down. Last, where the workers' bytes
    (not the store) set a pattern's rounds, W processes run it on large values: what its
    bytes take beyond all of that is its slowdown.

    Every probe process keeps its freed buffers as a worker does (``keep_freed_buffers``):
    a near-empty process that gave its heap back each round would fault its pages in again
    and measure rounds twice as long as a job's.
    """
    from analytic_model.model import PATTERNS, Polling, RoundCost, collective, store_s
    from analytic_model.profile import ChannelPerf, aws_profile

    known = {k: v for k, v in figures.items() if k in ChannelPerf.__dataclass_fields__}
    shipped = aws_profile()  # the channel's batching and the poll schedule are code, not measured
    batching = {"get_batch": shipped.channel(spec.kind).get_batch, "put_batch": shipped.channel(spec.kind).put_batch}
    perf = ChannelPerf(spec.kind, **{**batching, **known, "shared_cores": cores()})
    polling = Polling.of(shipped)
    header = len(codec.encode(_value(0)))
    small, large = (len(codec.encode(_value(n))) for n in (SMALL_FLOATS, large_floats))
    rounds = max(20, 4 * effort.repeats)  # spawning the processes costs more than the rounds
    worlds = sorted({2, max(2, effort.processes)})
    losses: dict[tuple[str, int], float] = {}
    wakes: list[float] = []  # what a step between collectives takes beyond the same step's share of a core
    slowdowns: dict[int, float] = {}  # per world: the crowded bytes' time over one worker's
    for world in worlds:
        for pattern in PATTERNS:

            def modelled(loss: float, world: int = world, pattern: str = pattern) -> float:
                with_loss = dataclasses.replace(perf, **_pattern_fields(pattern, wait_s=loss, wait_per_worker_s=0.0))
                return collective(with_loss, pattern, world, small - header, math.inf, polling, header).seconds

            # Rounds of a millisecond are at the scheduler's mercy: enough of them to last ``rounds_s``.
            enough = min(_MAX_PROBE_ROUNDS, max(rounds, math.ceil(effort.rounds_s / max(modelled(0.0), 1e-4))))
            probe = _mean_round(spec, world, SMALL_FLOATS, enough, pattern=pattern)
            wakes.append(max(probe.step_s - probe.step_alone_s / min(1.0, cores() / world), 0.0))
            measured = probe.round_s - probe.step_s
            losses[pattern, world] = _solve_increasing(modelled, measured, high=max(measured, 1e-6))
            log.debug(
                "%s %s W=%d, small values: round %.2f ms, modelled %.2f ms without waiting: wait loss %.2f ms",
                spec.kind, pattern, world, measured * 1e3, modelled(0.0) * 1e3, losses[pattern, world] * 1e3,
            )  # fmt: skip
        large_s = _mean_round(spec, world, large_floats, max(6, rounds // 2), pattern=None).round_s
        small_s = _mean_round(spec, world, SMALL_FLOATS, max(6, rounds // 2), pattern=None).round_s
        extra = large - small
        # What the bytes cost one worker, with its calls' CPU waiting for a core as the model has it.
        put_s, get_s = (extra / perf.bandwidth(op) * perf.cpu_stretch(op, world) for op in ("put", "get"))
        alone = put_s + (world - 1) * get_s
        store = store_s(perf, "put", 0, world * extra, world) + store_s(
            perf, "get", 0, world * (world - 1) * extra, world
        )
        if alone >= store:  # the workers, not the store, move the bytes: their slowdown is crowding
            slowdowns[world] = (large_s - small_s) / alone
    # The model slows bytes by 1 + crowding * (W - 1): the least-squares fit over the worlds
    # measured (averaging each world's own slope would weigh W=2 as much as a world 3x larger).
    fit = (
        sum((w - 1) * (r - 1.0) for w, r in slowdowns.items()) / sum((w - 1) ** 2 for w in slowdowns)
        if slowdowns
        else 0.0
    )
    # A step right after a wait runs on cold caches (and a core that may be asleep).
    figures = {"crowding": max(fit, 0.0), "step_wake_s": statistics.fmean(wakes)}
    for pattern in PATTERNS:
        top = losses[pattern, worlds[-1]]
        per_worker = (top - losses[pattern, 2]) / (worlds[-1] - 2) if len(worlds) > 1 else 0.0
        figures.update(_pattern_fields(pattern, wait_s=losses[pattern, 2], wait_per_worker_s=max(per_worker, 0.0)))
    # Each pattern with large values, round after round: what its bytes take in real rounds
    # beyond the figures so far (the ranks move them while the others poll and compute).
    fitted = dataclasses.replace(perf, **figures)
    for pattern in PATTERNS:
        factors = []
        for world in worlds:

            def slowed(excess: float, world: int = world, pattern: str = pattern) -> RoundCost:
                with_slowdown = dataclasses.replace(fitted, **_pattern_fields(pattern, bytes_slowdown=1.0 + excess))
                return collective(with_slowdown, pattern, world, large - header, math.inf, polling, header)

            def slowed_s(excess: float, slowed: Callable[[float], RoundCost] = slowed) -> float:
                return slowed(excess).seconds

            unslowed = slowed(0.0)
            if unslowed.phases["chain"] < unslowed.phases["store_busy"]:
                factors.append(1.0)  # the store sets these rounds, not the workers' bytes: nothing to learn
                continue
            probe = _mean_round(spec, world, large_floats, max(6, rounds // 2), pattern=pattern)
            measured = probe.round_s - probe.step_s
            factors.append(1.0 + _solve_increasing(slowed_s, measured, high=_MAX_SLOWDOWN - 1.0))
            log.debug(
                "%s %s W=%d, large values: round %.2f ms, modelled %.2f ms: bytes slowdown %.2f",
                spec.kind, pattern, world, measured * 1e3, unslowed.seconds * 1e3, factors[-1],
            )  # fmt: skip
        figures.update(_pattern_fields(pattern, bytes_slowdown=statistics.fmean(factors)))
    return figures


_MAX_SLOWDOWN = 5.0  # bytes slower than this in real rounds would be a broken measurement
_MAX_PROBE_ROUNDS = 2000


def _pattern_fields(pattern: str, **figures: float) -> dict[str, Any]:
    """The profile's names of ``pattern``'s own figures (ScatterReduce's carry an ``sr_`` prefix)."""
    prefix = "sr_" if pattern == "scatter_reduce" else ""
    return {f"{prefix}{name}": value for name, value in figures.items()}


def channel_figures(spec: ChannelSpec, effort: Effort, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Everything the model needs to know about one channel."""
    say = say or (lambda _: None)
    keep_freed_buffers()  # this process measures one worker's calls: its heap behaves as a worker's
    say(f"channel {spec.kind}: latency and bandwidth")
    with open_channel(spec) as channel:
        channel.ensure()
        channel.ping()
        # One worker's view, taken three times a few seconds apart (between the loaded
        # measurements): where a process runs relative to the store can halve a loopback
        # call for seconds at a time, so each figure is the median of the three.
        single = [measure_channel(channel, effort)]
        cleanup_cpu_s, cleanup_wall_s = measure_cleanup(channel, effort)
        large_floats = _sizes(channel, effort.large_bytes)[-1]
        say(f"channel {spec.kind}: 2 and {effort.processes} processes at once")
        figures: dict[str, Any] = dict(measure_store(spec, effort, large_floats, 2))
        single.append(measure_channel(channel, effort))
        if effort.processes > 2:
            # A local store shares the machine's cores with its clients: its time per request grows with them.
            crowd = measure_store(spec, effort, large_floats, effort.processes)
            pair = {op: figures[f"server_{op}_s"] or 1.0 for op in ("put", "get")}
            growth = [(crowd[f"server_{op}_s"] or 0.0) / pair[op] - 1.0 for op in ("put", "get")]
            figures["server_growth"] = max(statistics.fmean(growth), 0.0) / (effort.processes - 2)
            for op in ("put", "get"):  # the byte limits from the heavier load, where the bytes dominate
                figures[f"server_{op}_Bps"] = crowd[f"server_{op}_Bps"] or figures[f"server_{op}_Bps"]
        single.append(measure_channel(channel, effort))
        figures.update({name: statistics.median(m[name] for m in single) for name in single[0]})
        for op in ("put", "get"):
            # Where the clients share the store's cores, the loaded probes' time per request
            # includes the clients' own CPU; the store spends on a request at most what one
            # worker's call takes beyond that worker's CPU.
            unshared = figures[f"latency_{op}_s"] * (1.0 - figures[f"cpu_share_{op}"])
            figures[f"server_{op}_s"] = min(figures[f"server_{op}_s"], unshared)
        figures["cleanup_cpu_s"] = cleanup_cpu_s
        # The store's time for a batch delete: what it takes beyond a put's client and network
        # part (moto parses and applies a DeleteObjects far slower than a PUT).
        server_put = figures.get("server_put_s") or 0.0
        figures["server_delete_s"] = max(cleanup_wall_s - (figures["latency_put_s"] - server_put), server_put)
        figures["max_item_bytes"] = channel.max_item_bytes
    say(f"channel {spec.kind}: workers exchanging values")
    figures.update(measure_exchange(spec, figures, effort, large_floats))
    return figures


def calibrate(
    channels: dict[str, ChannelSpec],
    probes: Sequence[ComputeProbe],
    *,
    storage: StorageSpec | None,
    effort: Effort,
    target: str,
    shared_cores: float | None,
    startup: tuple[float, float] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure everything for one target and return the (partial) profile."""
    say = on_step or (lambda _: None)
    keep_freed_buffers()  # the compute probes time a worker's steps: its heap behaves as a worker's
    measured_channels = {kind: channel_figures(spec, effort, say) for kind, spec in channels.items()}
    compute: dict[str, Any] = {"measured": {}}
    for probe in probes:
        say(f"compute: {probe.model} ({probe.features} features, batch {probe.batch_size})")
        key, figures = measure_compute(probe)
        compute["measured"][key] = figures
        if not probe.sparse and figures["flops_per_sample"] and figures["per_sample_s"] > 0:
            # A dense model's rate stands for others of its kind (a sparse row's work is its nonzeros).
            compute.setdefault("vcpu_gflops", {})[figures["kind"]] = (
                figures["flops_per_sample"] / figures["per_sample_s"] / 1e9
            )
            compute.setdefault("per_step_s", {})[figures["runtime"]] = figures["per_step_s"]
    compute["add_Bps"] = measure_add_Bps()
    faas: dict[str, Any] = {"shared_cores": shared_cores}
    if startup is None:
        say("worker start-up")
        startup = measure_startup(effort.processes)
    cold, per_worker = startup
    faas["cold_start_s"] = {"numpy": cold}
    faas["invoke_s"] = per_worker
    if storage is not None:
        say("loading from the data store")
        with open_channel(ChannelSpec(kind="s3", bucket=storage.bucket, endpoint_url=storage.endpoint_url)) as store:
            store.ensure()
            faas["network_Bps"], faas["load_latency_s"] = measure_load(store, effort)
    host = platform.node() or "this machine"
    when = datetime.now(UTC).isoformat(timespec="seconds")
    profile: dict[str, Any] = {
        "_source": f"measured by 'lambdaml calibrate' on {host} ({cores()} cores) at {when}, target {target}",
        "target": target,
        "created": when,
        "host": {"name": host, "cores": cores(), "machine": platform.machine(), "python": platform.python_version()},
        "channels": measured_channels,
        "compute": compute,
        "faas": faas,
    }
    if target == "local":
        # The local backend's worker processes neither checkpoint nor pay for an INIT phase.
        profile["lambda"] = {"checkpoint_every": None, "init_billed": False}
    return profile


@contextmanager
def local_channels(
    kinds: Sequence[str],
    *,
    endpoint_url: str | None = None,
    redis: str | None = None,
    memcached: str | None = None,
) -> Iterator[tuple[dict[str, ChannelSpec], StorageSpec]]:
    """Channel specs on loopback: given endpoints, or services started for the measurement."""
    from lambdaml.local import services

    with ExitStack() as stack:
        if endpoint_url is None:  # S3 is needed anyway: loading a shard is measured from it
            moto = services.start_moto()
            stack.callback(moto.stop)
            endpoint_url = moto.url
        specs: dict[str, ChannelSpec] = {}
        token = secrets.token_hex(3)
        for kind in kinds:
            if kind == "s3":
                specs[kind] = ChannelSpec(kind="s3", bucket=f"lambdaml-calibrate-{token}", endpoint_url=endpoint_url)
            elif kind == "dynamodb":
                specs[kind] = ChannelSpec(
                    kind="dynamodb", table=f"lambdaml-calibrate-{token}", endpoint_url=endpoint_url
                )
            elif kind in ("redis", "memcached"):
                address = redis if kind == "redis" else memcached
                if address is None:
                    start = services.start_redis if kind == "redis" else services.start_memcached
                    service = start()
                    stack.callback(service.stop)
                    address = f"127.0.0.1:{service.port}"
                host, _, port = address.rpartition(":")
                if not host or not port.isdigit():
                    raise ConfigError(f"--{kind} must be HOST:PORT, got {address!r}")
                specs[kind] = ChannelSpec.model_validate({"kind": kind, "host": host, "port": int(port)})
            else:
                raise ConfigError(f"unknown channel {kind!r}; known: {', '.join(KINDS)}")
        yield specs, StorageSpec(bucket=f"lambdaml-calibrate-data-{token}", endpoint_url=endpoint_url)


def stack_target(name: str, kinds: Sequence[str]) -> tuple[dict[str, ChannelSpec], StorageSpec, bool, Any]:
    """A stack's channels and data bucket; whether it is a local stack; the stack itself."""
    from lambdaml.runtime import remote

    stack = remote.resolve_stack(name)
    specs: dict[str, ChannelSpec] = {}
    for kind in kinds:
        if kind == "s3":
            specs[kind] = ChannelSpec(
                kind="s3", bucket=stack.output("CommBucketName"), endpoint_url=stack.endpoints.get("s3"),
                region=stack.region,
            )  # fmt: skip
        elif kind == "dynamodb":
            specs[kind] = ChannelSpec(
                kind="dynamodb", table=stack.output("ChannelTableName"), endpoint_url=stack.endpoints.get("dynamodb"),
                region=stack.region,
            )  # fmt: skip
        elif kind in ("redis", "memcached"):
            if "CacheEndpoint" not in stack.outputs or stack.outputs.get("CacheKind", kind) != kind:
                raise ConfigError(f"stack {name!r} has no {kind} cache; calibrate the channels it has")
            host, _, port = stack.outputs["CacheEndpoint"].partition(":")
            tls = kind == "redis" and not stack.endpoints  # ElastiCache Redis in the template speaks TLS only
            specs[kind] = ChannelSpec.model_validate(
                {"kind": kind, "host": host, "port": int(port) if port else None, "tls": tls}
            )
        else:
            raise ConfigError(f"unknown channel {kind!r}; known: {', '.join(KINDS)}")
    storage = StorageSpec(
        bucket=stack.output("DataBucketName"), endpoint_url=stack.endpoints.get("s3"), region=stack.region
    )
    return specs, storage, bool(stack.endpoints), stack


def measure_stack_startup(stack: Any, repeats: int) -> tuple[float, float, float]:
    """(first invocation, warm invocation, asynchronous Invoke call) of the stack's coordinator.

    The event names no job, so the coordinator answers at once without touching anything.
    """
    import json

    client = stack.client("lambda", read_timeout_s=120, max_attempts=1)
    function = stack.output("CoordinatorFunctionName")
    payload = json.dumps({"action": "calibrate"}).encode()

    def call(kind: str) -> None:
        client.invoke(FunctionName=function, InvocationType=kind, Payload=payload)

    try:
        first = _median_time(lambda: call("RequestResponse"), 1)
        warm = _median_time(lambda: call("RequestResponse"), repeats)
        invoke = _median_time(lambda: call("Event"), repeats)
    except Exception as exc:  # botocore's errors: the stack's functions cannot be reached
        raise ConfigError(f"cannot invoke {function} in stack {stack.name!r}: {exc}") from None
    return first, warm, invoke
