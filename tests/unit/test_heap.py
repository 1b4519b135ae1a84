"""A worker keeps its freed buffers: rounds of model-sized values fault in no fresh pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lambdaml.runtime.heap import keep_freed_buffers

# Every script opens with this: malloc as its first argument names it, and a way to count the
# page faults of a round. "keep": as a worker keeps buffers; "trim128": so, but the heap given
# back above 128 MiB free; "mapped": every buffer over 1 MB mapped on its own, as glibc's
# self-tuning threshold does now and then (which it does depends on timing); "default": glibc's own.
_PRELUDE = """
import ctypes, resource, statistics, sys
from lambdaml.runtime.heap import keep_freed_buffers
if sys.argv[1] in ("keep", "trim128"):
    assert keep_freed_buffers()
if sys.argv[1] == "trim128":
    assert ctypes.CDLL(None).mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
if sys.argv[1] == "mapped":
    assert ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD

def faults_per_round(round_, rounds, summary=statistics.median):
    faults = []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        round_()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return summary(faults)
"""

# A round's buffers in a near-empty process: an encoded 800 KB vector, the bytes read back,
# the decoded copy and a sum. Prints the mean page faults of a round.
_ROUNDS = """
import numpy as np
from lambdaml import codec
x = np.random.default_rng(0).standard_normal(100_000)
def round_():
    global raw, y, total  # each round's buffers live until the next round's replace them
    raw = codec.encode(x)
    y = codec.decode(bytes(raw), dtype=x.dtype, shape=x.shape).copy()
    total = np.add(x, y)
print(faults_per_round(round_, 300, statistics.fmean))
"""


# The values a channel's threads read: 10 MB receive buffers allocated, filled and freed on a
# pool's threads, as a chunked Memcached value is read at d = 1e7. Prints the median page faults
# of a round.
_THREAD_ROUNDS = """
from concurrent.futures import ThreadPoolExecutor
def receive(_):
    value = bytearray(10_000_000)
    value[::4096] = bytes(len(value[::4096]))
    return len(value)
with ThreadPoolExecutor(4) as pool:
    list(pool.map(receive, range(8)))
    print(faults_per_round(lambda: list(pool.map(receive, range(8))), 20))
"""


# A round of a model over malloc's largest mmap threshold (32 MiB): d = 1e7 float32, a 40 MB
# vector, its encoding read back and the result the collective returns. Prints the median page
# faults of a round.
_BIG_ROUNDS = """
import numpy as np
from lambdaml import codec
x = np.random.default_rng(0).standard_normal(10_000_000, dtype=np.float32)
def round_():
    global raw, out  # each round's buffers live until the next round's replace them, as a job's do
    raw = bytearray(codec.encode(x))
    out = np.empty_like(x)
    out[:] = codec.decode(raw, dtype=x.dtype, shape=x.shape)
round_(), round_()  # the heap grows to hold two rounds' buffers
print(faults_per_round(round_, 10))
"""


# A 48 MB value read through the Redis channel (its port the second argument), round after
# round. Prints the median page faults of a get.
_REDIS_READS = """
import os
import numpy as np
from lambdaml import codec, keys
from lambdaml.channels import open_channel
from lambdaml.config import ChannelSpec
with open_channel(ChannelSpec(kind="redis", port=int(sys.argv[2]))) as channel:
    key = keys.comm_key(f"heap-test-{os.getpid()}", 0, "big", rank=0)
    vector = codec.encode(np.ones(12_000_000, dtype=np.float32))  # d = 1.2e7, kept as a worker keeps its model
    channel.put(key, vector)
    def read():
        assert len(channel.get(key)) == len(vector)  # read, checked and freed, as a worker frees a decoded value
    read(), read()
    print(faults_per_round(read, 6))
    channel.delete_stored([key])
"""


def _faults_per_round(mode: str, script: str = _ROUNDS, *args: str) -> float:
    command = [sys.executable, "-c", _PRELUDE + script, mode, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    return float(done.stdout)


@pytest.mark.skipif(not keep_freed_buffers(), reason="malloc here is not glibc's")
def test_kept_buffers_fault_in_far_fewer_pages_per_round() -> None:
    default, kept = _faults_per_round("default"), _faults_per_round("keep")
    # glibc's own thresholds hand a near-empty heap back every round: about 1/3 of the
    # round's 3.2 MB of buffers (800 KB is 195 pages) is faulted in again each time.
    assert default > 30
    assert kept < default / 5


@pytest.mark.skipif(not keep_freed_buffers(), reason="malloc here is not glibc's")
def test_buffers_of_a_pools_threads_are_kept_too() -> None:
    mapped, kept = _faults_per_round("mapped", _THREAD_ROUNDS), _faults_per_round("keep", _THREAD_ROUNDS)
    # Mapped on their own, the round's eight 10 MB buffers are faulted in afresh (measured: 19,536
    # faults a round); on the one kept heap they are reused (0).
    assert mapped > 5000
    assert kept < mapped / 500  # under 40, as tight as the bound against glibc's own threshold was


@pytest.mark.skipif(not keep_freed_buffers(), reason="malloc here is not glibc's")
def test_buffers_over_the_mmap_threshold_are_kept_too() -> None:
    default, kept = _faults_per_round("default", _BIG_ROUNDS), _faults_per_round("keep", _BIG_ROUNDS)
    # Mapped on their own, the round's three 40 MB buffers are faulted in afresh each time
    # (measured: 20,100 faults a round); from the heap they are reused (0).
    assert default > 5000
    assert kept < default / 50


@pytest.mark.skipif(not keep_freed_buffers(), reason="malloc here is not glibc's")
def test_the_buffers_of_a_large_get_stay_in_the_heap(redis_port: int) -> None:
    trimmed = _faults_per_round("trim128", _REDIS_READS, str(redis_port))
    kept = _faults_per_round("keep", _REDIS_READS, str(redis_port))
    # redis-py's connection buffer grows to 64 MB and the value is copied out of it twice: with
    # 128 MiB of free heap kept, pages go back and are faulted in again on every get (measured:
    # 46,800 a get, 142 ms against 47).
    assert trimmed > 5000
    assert kept < trimmed / 50
