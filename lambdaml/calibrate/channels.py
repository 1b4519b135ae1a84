"""Probes of one channel through the code the workers run: one worker's calls, the store under
load from several processes at once, and a rank's batch delete."""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Sequence
from typing import Any, TypedDict

from analytic_model.calibration import CallFigures, StoreFigures
from analytic_model.channel_perf import ChannelPerf
from analytic_model.transfers import call_s
from lambdaml import codec, keys
from lambdaml.calibrate.probing import PROBE_TIMEOUT_S, SMALL_FLOATS, Effort, run_together, value
from lambdaml.channels import Channel, open_channel
from lambdaml.config import ChannelSpec
from lambdaml.runtime.heap import MMAP_THRESHOLD, keep_freed_buffers

BATCH = 8  # values per put_many / get_many when measuring the extra cost of each
_SATURATION_KEYS = 8  # keys per load process, written in turn


def sizes(channel: Channel, largest: int) -> list[int]:
    """Float counts of the values timed: one small, three large that each stay one item.

    Chunking has its own term in the model, so no measured value is chunked.
    """
    limit = channel.max_item_bytes
    top = min(largest, int(limit * 0.9)) if limit else largest
    return [SMALL_FLOATS] + [max(SMALL_FLOATS + 1, top // 8 // d) for d in (16, 4, 1)]


def _fit_slope(nbytes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares seconds per byte through the measured sizes (never zero: a bandwidth is finite)."""
    return max(statistics.linear_regression(nbytes, seconds).slope, 1e-12)


def measure_channel(channel: Channel, effort: Effort) -> CallFigures:
    """One worker's view of a channel: latency, the extra cost per batched value, bandwidth.

    Sizes are measured round-robin, so a burst of load elsewhere hits all of them alike;
    every put goes to a fresh key, as the patterns' writes do.
    """
    job = f"calibrate-{secrets.token_hex(3)}"
    values = [value(n, seed=i) for i, n in enumerate(sizes(channel, effort.large_bytes))]
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
            for i, one in enumerate(values):
                k = key()
                started, cpu_started = time.perf_counter(), time.process_time()
                channel.put(k, codec.encode(one))
                put_s, put_cpu = time.perf_counter() - started, time.process_time() - cpu_started
                started, cpu_started = time.perf_counter(), time.process_time()
                codec.decode(channel.get(k), dtype=one.dtype, shape=one.shape)
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
    return CallFigures(
        latency_put_s=latency_put,
        latency_get_s=latency_get,
        extra_put_s=max(statistics.median(many_puts) - latency_put, 0.0) / (BATCH - 1),
        extra_get_s=max(statistics.median(many_gets) - latency_get, 0.0) / (BATCH - 1),
        bandwidth_put_Bps=1.0 / _fit_slope(wire, put_medians),
        bandwidth_get_Bps=1.0 / _fit_slope(wire, get_medians),
        # On cores the workers share, this part of a call waits for a core when they outnumber them.
        cpu_share_put=min(cpu["put"] / wall["put"], 1.0),
        cpu_share_get=min(cpu["get"] / wall["get"], 1.0),
    )


def measure_ranged_reads(channel: Channel, effort: Effort, object_bytes: int = 32_000_000) -> float | None:
    """The rate the store reads whole objects at to serve a small ranged read of one, where it
    reads more than the range (moto reads and copies the whole value, then slices it; S3 reads
    the range): None where a range of a large object costs no more than a small object's get.

    ScatterReduce's packed layout serves every piece as a range of a W-1 times larger object:
    on moto at W = 8, d = 1e7 the store read 7x the bytes the ranges hold.
    """
    if not channel.native_ranges:
        return None
    job = f"calibrate-range-{secrets.token_hex(3)}"
    whole, small = keys.comm_key(job, 0, "range", rank=0), keys.comm_key(job, 1, "range", rank=0)
    ranged, plain = [], []
    try:
        channel.put_many([(whole, bytes(object_bytes)), (small, bytes(1024))])
        for _ in range(effort.repeats):  # alternated, so a burst of load elsewhere hits both alike
            started = time.perf_counter()
            channel.get_range(whole, 0, 1024)
            ranged.append(time.perf_counter() - started)
            started = time.perf_counter()
            channel.get(small)
            plain.append(time.perf_counter() - started)
    finally:
        channel.clear(keys.comm_prefix(job))
    excess = statistics.median(ranged) - statistics.median(plain)
    # Below a tenth of a small get, the difference is noise: the store reads the range.
    return object_bytes / excess if excess > 0.1 * statistics.median(plain) else None


class BigValueFigures(TypedDict):
    """``CallFigures``' (and ``ChannelPerf``'s) big-value fields."""

    big_value_bytes: float
    big_from_bytes: float
    bandwidth_put_big_Bps: float
    bandwidth_get_big_Bps: float


def measure_big_values(channel: Channel, effort: Effort, perf: ChannelPerf) -> BigValueFigures:
    """The rates one worker moves the bytes of a value over malloc's largest mmap threshold at (its put
    and get through the worker's code, chunked where the channel chunks; ``perf``: the channel
    as measured so far): ``CallFigures``' big-value fields.

    A process whose malloc maps such buffers on their own faults their pages in afresh each
    round: on Redis a 40 MB get moved a third as many bytes a second as an 8 MB one. A worker
    keeps them in its heap (``keep_freed_buffers``) where it can, and this process does as a
    worker's does: the rates are its own."""
    job = f"calibrate-big-{secrets.token_hex(3)}"
    one = value(effort.big_bytes // 8)
    data = codec.encode(one)
    counter = iter(range(10**9))
    times: dict[str, list[float]] = {"put": [], "get": []}
    try:
        for _ in range(effort.big_repeats):
            key = keys.comm_key(job, next(counter), "big", rank=0)
            started = time.perf_counter()
            channel.put(key, data)
            times["put"].append(time.perf_counter() - started)
            started = time.perf_counter()
            # Read as the patterns read it: its length known (on Memcached, its manifest and parts in one get).
            found = channel.wait_for([key], PROBE_TIMEOUT_S, lengths={key: len(data)})
            codec.decode(found[key], dtype=one.dtype, shape=one.shape)
            times["get"].append(time.perf_counter() - started)
            channel.delete_stored([key])
    finally:
        channel.clear(keys.comm_prefix(job))
    bandwidth: dict[str, float] = {}
    for op in ("put", "get"):
        # The call's requests (its parts and manifest where chunked) as the model times them; the rest is bytes.
        requests_s = call_s(perf, op, 1, len(data)) - perf.bytes_s(op, len(data))
        bytes_s = max(statistics.median(times[op]) - requests_s, 1e-9)
        bandwidth[op] = len(data) / bytes_s
    return {
        "big_value_bytes": float(len(data)),
        "big_from_bytes": float(MMAP_THRESHOLD),
        "bandwidth_put_big_Bps": bandwidth["put"],
        "bandwidth_get_big_Bps": bandwidth["get"],
    }


def _saturate(spec: ChannelSpec, index: int, seconds: float, large_floats: int, barrier: Any, results: Any) -> None:
    """One of several processes hammering a channel: count small puts, small gets, large puts, large gets."""
    try:
        keep_freed_buffers()  # as a worker's process does
        channel = open_channel(spec)
        job = f"calibrate-sat-{spec.kind}"
        counts: dict[str, int] = {}
        for label, one in (("small", value(SMALL_FLOATS)), ("large", value(large_floats))):
            data = codec.encode(one)
            # A ring of keys, each written and later overwritten: new keys as the patterns write
            # them, in bounded memory (a cache that fills up would evict a running job's values).
            ring = [keys.comm_key(job, i, label, rank=index) for i in range(_SATURATION_KEYS)]
            puts = gets = 0
            barrier.wait(PROBE_TIMEOUT_S)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline or puts < len(ring):
                channel.put(ring[puts % len(ring)], codec.encode(one))
                puts += 1
            counts[f"{label}_puts"] = puts
            recent = ring
            barrier.wait(PROBE_TIMEOUT_S)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                codec.decode(channel.get(recent[gets % len(recent)]), dtype=one.dtype, shape=one.shape)
                gets += 1
            counts[f"{label}_gets"] = gets
            counts[f"{label}_bytes"] = len(data)
        channel.close()
        results.put((index, counts, None))
    except Exception as exc:  # reported to the parent as one line
        results.put((index, {}, f"{type(exc).__name__}: {exc}"))


def measure_store(spec: ChannelSpec, effort: Effort, large_floats: int, n: int) -> StoreFigures:
    """What the store, or the machine every process shares, sustains with ``n`` workers at once."""
    args = [(spec, i, effort.saturation_s, large_floats) for i in range(n)]
    timeout_s = PROBE_TIMEOUT_S + 4 * effort.saturation_s
    reports = run_together(_saturate, args, f"calibrating {spec.kind}", timeout_s)
    total = {name: sum(counts[name] for _, counts in reports) for name in reports[0][1]}
    with open_channel(spec) as channel:
        channel.clear(keys.comm_prefix(f"calibrate-sat-{spec.kind}"))
    seconds = effort.saturation_s
    per_request: dict[str, float] = {}
    byte_limit: dict[str, float | None] = {}
    for op in ("put", "get"):
        per_request[op] = seconds / max(total[f"small_{op}s"], 1)
        count = total[f"large_{op}s"]
        byte_time = seconds - count * per_request[op]
        moved = count * total["large_bytes"]
        # Too few large requests to tell bytes from requests apart: no separate byte limit.
        byte_limit[op] = moved / byte_time if byte_time > 0.1 * seconds and count >= n else None
    return StoreFigures(per_request["put"], per_request["get"], byte_limit["put"], byte_limit["get"])


def measure_cleanup(channel: Channel, effort: Effort, keys_per_round: int = 4) -> tuple[float, float]:
    """(CPU seconds, wall seconds) this process spends deleting what it wrote in a finished
    round, as every rank does: one batch delete of known keys."""
    job = f"calibrate-clean-{secrets.token_hex(3)}"
    data = codec.encode(value(SMALL_FLOATS))
    cpu, wall = [], []
    try:
        for round_ in range(effort.repeats):
            stored = channel.put_many(
                [(keys.comm_key(job, round_, "cal", rank=0, chunk=c), data) for c in range(keys_per_round)]
            )
            started, cpu_started = time.perf_counter(), time.process_time()
            channel.delete_stored(stored)
            cpu.append(time.process_time() - cpu_started)
            wall.append(time.perf_counter() - started)
    finally:
        channel.clear(keys.comm_prefix(job))
    return statistics.median(cpu), statistics.median(wall)
