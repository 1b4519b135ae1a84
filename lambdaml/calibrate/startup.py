"""A worker's start and its data: spawning a worker process (and its imports), loading a shard from S3."""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import statistics
import time
from typing import Any

from lambdaml import keys
from lambdaml.calibrate.probing import PROBE_TIMEOUT_S, Effort, median_time, run_all
from lambdaml.channels import Channel


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
        return float(max(run_all(procs, results, "calibrating start-up", PROBE_TIMEOUT_S)))

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
        latency = median_time(lambda: store.get(small_key), effort.repeats)
        large = median_time(lambda: store.get(large_key), max(3, effort.repeats // 3))
    finally:
        store.clear(prefix)
    return size / max(large - latency, 1e-6), latency
