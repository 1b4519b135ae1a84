"""A worker's heartbeat: after every epoch it records where it is and reads its job's cancel key
on the data store. Timed through ``lambdaml.runtime.heartbeat`` itself, alone and with several
processes beating at once: under BSP every rank beats at the end of the same epoch, and the
next epoch's first round waits for the slowest of them."""

from __future__ import annotations

import secrets
import statistics
import time
from typing import Any

from lambdaml import keys
from lambdaml.calibrate.probing import PROBE_TIMEOUT_S, Effort, median_time, run_together
from lambdaml.config import StorageSpec
from lambdaml.runtime.heartbeat import Heartbeat
from lambdaml.runtime.records import Attempt
from lambdaml.storage import open_storage

ATTEMPT = 1


def _attempt(job_id: str) -> Attempt:
    return Attempt(job_id=job_id, number=ATTEMPT, dataset_version="calibrate", started_at=time.time())


def _beat_together(storage: StorageSpec, job_id: str, rank: int, repeats: int, barrier: Any, results: Any) -> None:
    """One of several processes beating at once, every beat started together (as BSP's ranks
    end an epoch together): reports each beat's seconds."""
    try:
        beat = Heartbeat(open_storage(storage), _attempt(job_id))
        beat(rank, 0, 0.0, 0.0)  # the first request opens the connection
        seconds = []
        for epoch in range(1, repeats + 1):
            barrier.wait(PROBE_TIMEOUT_S)
            started = time.perf_counter()
            beat(rank, epoch, 0.0, 0.0)
            seconds.append(time.perf_counter() - started)
        results.put((rank, seconds, None))
    except Exception as exc:  # reported to the parent as one line
        results.put((rank, [], f"{type(exc).__name__}: {exc}"))


def measure_heartbeat(storage: StorageSpec, effort: Effort) -> tuple[float, float]:
    """(one worker's heartbeat alone, extra seconds per further worker beating at the same time)."""
    job_id = f"calibrate-beat-{secrets.token_hex(3)}"
    store = open_storage(storage)
    try:
        beat = Heartbeat(store, _attempt(job_id))
        beat(0, 0, 0.0, 0.0)  # the first request opens the connection
        alone = median_time(lambda: beat(0, 1, 0.0, 0.0), effort.repeats)
        n = max(effort.processes, 2)
        args = [(storage, job_id, rank, effort.repeats) for rank in range(n)]
        reports = run_together(_beat_together, args, "calibrating heartbeats", PROBE_TIMEOUT_S)
        beats = [seconds for _, seconds in reports]
        # Each epoch waits for its slowest rank's beat, and a job's time is the sum of its epochs: the mean.
        crowded = statistics.fmean(max(together) for together in zip(*beats, strict=True))
    finally:
        store.clear(keys.attempt_prefix(job_id, ATTEMPT))
    return alone, max(crowded - alone, 0.0) / (n - 1)
