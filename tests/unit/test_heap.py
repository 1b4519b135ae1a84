"""A worker keeps its freed buffers: rounds of model-sized values fault in no fresh pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lambdaml.runtime.heap import keep_freed_buffers

# A round's buffers in a near-empty process: an encoded 800 KB vector, the bytes read back,
# the decoded copy and a sum. Prints the page faults per round.
_ROUNDS = """
import resource, sys
import numpy as np
from lambdaml import codec
from lambdaml.runtime.heap import keep_freed_buffers
if sys.argv[1] == "keep":
    assert keep_freed_buffers()
x = np.random.default_rng(0).standard_normal(100_000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(300):
    raw = codec.encode(x)
    y = codec.decode(bytes(raw), dtype=x.dtype, shape=x.shape).copy()
    total = np.add(x, y)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 300)
"""


# The values a channel's threads read: 10 MB receive buffers allocated, filled and freed on a
# pool's threads, as a chunked Memcached value is read at d = 1e7. Prints the median page faults
# of a round. "mapped" fixes malloc's mmap threshold at 1 MB, so every buffer is mapped on its
# own, as glibc's self-tuning threshold does now and then (which it does depends on timing).
_THREAD_ROUNDS = """
import ctypes, resource, statistics, sys
from concurrent.futures import ThreadPoolExecutor
from lambdaml.runtime.heap import keep_freed_buffers
if sys.argv[1] == "keep":
    assert keep_freed_buffers()
else:
    assert ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
def receive(_):
    value = bytearray(10_000_000)
    value[::4096] = bytes(len(value[::4096]))
    return len(value)
faults = []
with ThreadPoolExecutor(4) as pool:
    list(pool.map(receive, range(8)))
    for _ in range(20):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        list(pool.map(receive, range(8)))
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(statistics.median(faults))
"""


# A round of a model over malloc's largest mmap threshold (32 MiB): d = 1e7 float32, a 40 MB
# vector, its encoding read back and the result the collective returns. Prints the median page
# faults of a round.
_BIG_ROUNDS = """
import resource, statistics, sys
import numpy as np
from lambdaml import codec
from lambdaml.runtime.heap import keep_freed_buffers
if sys.argv[1] == "keep":
    assert keep_freed_buffers()
x = np.random.default_rng(0).standard_normal(10_000_000, dtype=np.float32)
def round_():
    global raw, out  # each round's buffers live until the next round's replace them, as a job's do
    raw = bytearray(codec.encode(x))
    out = np.empty_like(x)
    out[:] = codec.decode(raw, dtype=x.dtype, shape=x.shape)
round_(), round_()  # the heap grows to hold two rounds' buffers
faults = []
for _ in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    round_()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(statistics.median(faults))
"""


# A 48 MB value read through the Redis channel, round after round. "trim128" keeps buffers as
# a worker does but gives the heap back above 128 MiB free. Prints the median page faults of a get.
_REDIS_READS = """
import ctypes, os, resource, statistics, sys
from lambdaml.runtime.heap import keep_freed_buffers
assert keep_freed_buffers()
if sys.argv[1] == "trim128":
    assert ctypes.CDLL(None).mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
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
    faults = []
    for _ in range(6):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        read()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    channel.delete_stored([key])
print(statistics.median(faults))
"""


def _faults_per_round(mode: str, script: str = _ROUNDS, *args: str) -> float:
    command = [sys.executable, "-c", script, mode, *args]
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
