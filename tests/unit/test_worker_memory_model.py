"""Which Lambda sizes hold a worker: its runtime's resident memory plus the measured factor x its binary shard."""

from __future__ import annotations

import math

from analytic_model import Workload, advise, aws_profile
from analytic_model.prediction import memory_needed_mb
from analytic_model.shard_size import binary_dataset_bytes

MIB = 2**20


def test_a_torch_worker_needs_more_than_a_numpy_one_for_the_same_shard() -> None:
    profile = aws_profile()
    shard = 100 * MIB
    numpy_mb, torch_mb = memory_needed_mb(profile, shard, "numpy"), memory_needed_mb(profile, shard, "torch")
    factor = profile.lambda_.data_memory_factor
    assert 1.0 <= factor < 2.0  # the shard once, and some temporaries
    assert (
        torch_mb - numpy_mb == profile.lambda_.runtime_memory_mb["torch"] - profile.lambda_.runtime_memory_mb["numpy"]
    )
    assert numpy_mb == profile.lambda_.runtime_memory_mb["numpy"] + factor * 100


def test_the_advisor_skips_the_sizes_a_shard_does_not_fit() -> None:
    rows = 20_000_000  # 2.3 GB of float32 shards: one worker needs about 2.7 GB
    workload = Workload("lr", dataset_bytes=binary_dataset_bytes(rows, 28), samples=rows, features=28)
    advice = advise(workload, workers=[1, 2], memory_mb=[1769, 3008], instances=["c5.large"])
    need = math.ceil(memory_needed_mb(aws_profile(), workload.dataset_bytes))
    assert f"FaaS 1 x 1769 MB: a worker needs about {need} MB for its shard" in advice.skipped
    assert {(r.workers, r.memory_mb) for r in advice.rows if r.platform == "faas"} == {(1, 3008), (2, 1769), (2, 3008)}
