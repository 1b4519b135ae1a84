"""What every probe shares: how long to measure, the values timed, a median timer, this machine's
cores, and running probe processes that each report once."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lambdaml.arrays import Array
from lambdaml.errors import LambdaMLError
from lambdaml.interrupts import sigint_blocked

SMALL_FLOATS = 8  # a small value: 8 float64 (96 bytes on the wire)
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Effort:
    """How long to measure: ``quick`` for tests, the default for a profile you keep."""

    repeats: int = 15
    saturation_s: float = 1.0
    large_bytes: int = 2_000_000
    processes: int = 4
    rounds_s: float = 0.5  # at least this long in the small-value exchange probes (their rounds take ~1 ms)
    big_bytes: int = 48_000_000  # a value over malloc's largest mmap threshold (32 MiB; a 10^7-float vector is 40 MB)
    big_repeats: int = 5

    @classmethod
    def quick(cls) -> Effort:
        return cls(
            repeats=5, saturation_s=0.3, large_bytes=1_000_000, processes=2, rounds_s=0.1, big_bytes=40_000_000,
            big_repeats=3,
        )  # fmt: skip


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _times(fn: Callable[[], Any], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    return statistics.median(_times(fn, repeats))


def least_time(fn: Callable[[], Any], repeats: int) -> float:
    """The fastest of ``repeats`` calls: other work on the machine only ever adds time, so the
    minimum is the estimate of a pure-CPU step that load disturbs least."""
    return min(_times(fn, repeats))


def value(n_floats: int, seed: int = 0) -> Array:
    return np.random.default_rng(seed).standard_normal(n_floats)


def run_all(procs: Sequence[Any], results: Any, what: str, timeout_s: float) -> list[Any]:
    """Start the processes and collect one report from each; a process that dies silently fails at once.

    They never see Ctrl-C (it would print a traceback from each): it stops them through this process.
    """
    with sigint_blocked():
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
    except BaseException:  # Ctrl-C, or a failed probe: the others need not finish
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        raise
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
    return reports


def run_together(
    target: Callable[..., None], args: Sequence[tuple[Any, ...]], what: str, timeout_s: float
) -> list[tuple[int, Any]]:
    """One spawned process per ``args``, each called with its args, a barrier they all share and the
    results queue; returns each one's ``(index, figures)``, or raises the first error one reported."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*own, barrier, results)) for own in args]
    reports = run_all(procs, results, what, timeout_s)
    failed = [error for _, _, error in reports if error]
    if failed:
        raise LambdaMLError(f"{what}: {failed[0]}")
    return [(index, figures) for index, figures, _ in reports]
