"""A worker's reported peak memory is its own, not that of the process that started it."""

from __future__ import annotations

import multiprocessing as mp
import sys
from multiprocessing.queues import Queue

import pytest

from lambdaml.runtime.worker import peak_rss_mb

PARENT_MIB = 400


def _report(queue: Queue[float]) -> None:
    queue.put(peak_rss_mb())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss carries the parent's RSS on Linux")
def test_a_spawned_worker_does_not_report_its_parents_memory() -> None:
    held = bytearray(PARENT_MIB * 2**20)
    held[::4096] = b"\1" * len(held[::4096])  # resident, not just reserved
    assert peak_rss_mb() > PARENT_MIB
    ctx = mp.get_context("spawn")  # as the local backend starts workers
    queue: Queue[float] = ctx.Queue()
    child = ctx.Process(target=_report, args=(queue,))
    child.start()
    reported = queue.get(timeout=120)
    child.join(timeout=120)
    # The child imports numpy and lambdaml (under 200 MiB); ru_maxrss would say at least PARENT_MIB.
    assert 0 < reported < PARENT_MIB - 100, reported
    del held
