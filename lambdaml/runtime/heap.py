"""Keep a worker's freed buffers for reuse instead of handing them back to the kernel every round.

A round allocates and frees buffers the size of the model (an encoded vector, a received
value, a decoded copy, a sum). glibc's malloc returns freed memory at the top of its heap
to the kernel once it exceeds a threshold that it tunes on the fly, so a worker whose heap
holds little else (a small shard, a large model) gives those pages back and faults them in
again next round, which can double a round. A fixed trim threshold keeps up to
``TRIM_THRESHOLD`` of free heap. It is that high because one get of a large value passes
through several buffers at once (redis-py reads a value into a buffer that grows past it, then
copies it out). What the heap keeps, the process held at its peak a moment before: keeping it
raises no peak, and a Lambda function's memory is its peak.

Buffers over malloc's mmap threshold (at most ``MMAP_THRESHOLD``, 32 MiB: a 40 MB vector at
d = 1e7 float32 is over it) would be mapped on their own, unmapped when freed and faulted in
afresh each round, whatever the trim threshold. So no buffer is mapped on its own: large ones
come from the heap and are reused too (where the heap cannot grow, malloc still maps memory).
The price is a somewhat higher peak RSS: freed large buffers stay in the heap.

Those thresholds govern the main heap only. A buffer a channel's thread allocates (a value it
reads) comes from that thread's own arena, whose heaps malloc maps and unmaps on its own terms,
so a large receive buffer can cost more to get than to read. One arena puts every thread's
buffers on the main heap; the threads share its lock, which a round's few large allocations
do not contend for.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# glibc's largest mmap threshold on 64-bit: where a process that maps large buffers (malloc's
# default, or a C library without ``mallopt``) starts to; calibration times values over it.
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8

_applied = False


def keep_freed_buffers() -> bool:
    """Fix malloc's trim threshold, map no buffer on its own and use one arena in this process (glibc
    only); True if all are set. Call it before the process starts threads: a thread that has
    allocated keeps its arena."""
    global _applied
    if _applied:
        return True
    try:
        # The process's own symbols include its C library's: no search (find_library runs ldconfig).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        log.debug("no mallopt in this process; malloc keeps its own thresholds")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_ARENA_MAX, 1))
    _applied = all(mallopt(parameter, value) for parameter, value in settings)
    if not _applied:
        log.debug("mallopt refused the thresholds; malloc keeps its own")
    return _applied
