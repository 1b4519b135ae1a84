"""Memory of sandboxes: measuring it from /proc, and killing a sandbox above its memory size.

The limit is enforced by sampling the resident set of the sandbox's process tree, not with
RLIMIT_AS: that limits address space, not memory, and torch alone maps more than 512 MB
while using about 240 MB (its import fails under a 512 MB RLIMIT_AS).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading

from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.models import IDLE_WAIT_S

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CAN_MONITOR_MEMORY = sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (Linux /proc); 0 when it is gone."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def peak_rss_mb(pid: int | None) -> int | None:
    """The peak resident set (VmHWM) of one process in MB, rounded up; None when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return math.ceil(int(line.split()[1]) / 1024)
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryWatcher:
    """Samples starting and working sandboxes every ``interval_s``; sleeps while none is (``wake`` ends that)."""

    def __init__(self, functions: Functions, enforce: bool, interval_s: float, stopping: threading.Event) -> None:
        self._functions = functions
        self._enforce = enforce and CAN_MONITOR_MEMORY
        if enforce and not CAN_MONITOR_MEMORY:
            log.warning("memory limits are not enforced on this platform (no /proc)")
        self._interval = interval_s
        self._stopping = stopping
        self._cond = threading.Condition()

    def wake(self) -> None:
        """A sandbox got work (or the service is stopping): look again."""
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        """Kill a sandbox whose process tree's RSS exceeds its memory size (sampled while it works)."""
        if not self._enforce:
            return
        while not self._stopping.is_set():
            active = [
                sb
                for pool in self._functions.pools()
                for sb in pool.snapshot()
                if sb.process is not None and not sb.dead and (sb.ready_mono is None or sb.current is not None)
            ]
            if not active:
                with self._cond:
                    self._cond.wait(IDLE_WAIT_S)
                continue
            for sandbox in active:
                pid = sandbox.pid
                limit = sandbox.fn.memory_mb * 1024 * 1024
                if pid is not None and (rss := tree_rss(pid)) > limit:
                    log.warning(
                        "%s pid %d uses %.0f MB > %d MB: killing it", sandbox.id, pid, rss / 2**20, sandbox.fn.memory_mb
                    )
                    with sandbox.cond:
                        sandbox.oom = True
                    sandbox.kill()
            self._stopping.wait(self._interval)
