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


def _faults_per_round(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, timeout=60, check=True)
    return float(done.stdout)


@pytest.mark.skipif(not keep_freed_buffers(), reason="malloc here is not glibc's")
def test_kept_buffers_fault_in_far_fewer_pages_per_round() -> None:
    default, kept = _faults_per_round("default"), _faults_per_round("keep")
    # glibc's own thresholds hand a near-empty heap back every round: about 1/3 of the
    # round's 3.2 MB of buffers (800 KB is 195 pages) is faulted in again each time.
    assert default > 30
    assert kept < default / 5
