"""Keep a worker's freed buffers for reuse instead of handing them back to the kernel every round.

A round allocates and frees buffers the size of the model (an encoded vector, a received
value, a decoded copy, a sum). glibc's malloc returns freed memory at the top of its heap
to the kernel once it exceeds a threshold that it tunes on the fly, so a worker whose heap
holds little else (a small shard, a large model) gives those pages back and faults them in
again next round: measured on loopback with an 800 KB vector, 60,000-70,000 page faults a
second and rounds twice as long. A fixed trim threshold keeps up to ``TRIM_THRESHOLD`` of free
heap. It is that high because one get of a large value passes through several buffers at
once: redis-py reads a 48 MB value into a buffer that grows to 64 MB, then copies it out, so
a threshold of 128 MiB still gave 47,000 pages back per get (142 ms a get, 47 ms with none
given back). What the heap keeps, the process held at its peak a moment before: keeping it
raises no peak, and a Lambda function's memory is its peak.

Buffers over malloc's mmap threshold (at most ``MMAP_THRESHOLD``, 32 MiB: a 40 MB vector at
d = 1e7 float32 is over it) would be mapped on their own, unmapped when freed and faulted in
afresh each round, whatever the trim threshold. So no buffer is mapped on its own: large ones
come from the heap and are reused too (where the heap cannot grow, malloc still maps memory).
On Memcached at W = 4, d = 1e7 the round went from 270 to 178 ms with AllReduce (its
aggregator's CPU halved) and from 170 to 140 ms with ScatterReduce; the workers' peak RSS went
up by at most a fifth (freed large buffers stay in the heap).

Those thresholds govern the main heap only. A buffer a channel's thread allocates (a value it
reads) comes from that thread's own arena, whose heaps malloc maps and unmaps on its own terms:
on Memcached at W = 4, d = 1e7 a 10 MB receive buffer took 13-31 ms to get, every round, more
than reading it. One arena puts every thread's buffers on the main heap (the worker's round
there: 15-20% less CPU); the threads share its lock, which a round's few large allocations
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
