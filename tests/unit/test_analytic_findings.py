"""The qualitative findings of the LambdaML study (Jiang et al., SIGMOD 2021), from the shipped AWS defaults only.

Each test sets up the paper's scenario, asks the advisor, and asserts the paper's ordering
with a margin. If a change to the defaults or the model flips one of them, the test says
which finding no longer holds. Datasets are sized as LambdaML's workers hold them (binary
float32 shards, ``binary_dataset_bytes``); where the paper's 8 GB of Higgs text changes a
verdict, a test says how and why.
"""

from __future__ import annotations

import itertools

import pytest

from analytic_model import Advice, Prediction, Workload, advise, aws_profile
from analytic_model.shard_size import binary_dataset_bytes

HIGGS_ROWS = 11_000_000
HIGGS_TEXT_BYTES = 8e9  # Higgs as the paper's workers read it from S3: text (its table lists about 8 GB)
HIGGS_BINARY_BYTES = binary_dataset_bytes(HIGGS_ROWS, 28)  # LambdaML's float32 shards: 1.28 GB
CIFAR10_BYTES = binary_dataset_bytes(50_000, 3 * 32 * 32)  # float32 pixels and labels
#: Epochs of a run long enough that Lambda's bill for training catches up with the cluster's
#: billed start-up (about 15 s of training on each Lambda worker against 70 s of EC2 start-up).
HIGGS_LONG_EPOCHS = 200
PAPER_LAMBDA_MB = 3008  # the paper's function memory


def _split(advice: Advice) -> tuple[list[Prediction], list[Prediction], list[Prediction]]:
    """FaaS rows, CPU-instance rows and GPU-instance rows."""
    instances = aws_profile().instances
    faas = [r for r in advice.rows if r.platform == "faas"]
    cpu = [r for r in advice.rows if r.platform == "iaas" and instances[r.option].gpu is None]
    gpu = [r for r in advice.rows if r.platform == "iaas" and instances[r.option].gpu is not None]
    return faas, cpu, gpu


def _higgs(algorithm: str, dataset_bytes: float, epochs: int = 10) -> Workload:
    return Workload(
        "lr", dataset_bytes=dataset_bytes, samples=HIGGS_ROWS, features=28, algorithm=algorithm, batch_size=10_000,
        epochs=epochs,
    )  # fmt: skip


@pytest.mark.parametrize("algorithm", ["admm", "ma_sgd"])
def test_lr_on_higgs_faas_is_faster_than_iaas_but_not_significantly_cheaper(algorithm: str) -> None:
    """Communication-light LR on Higgs, 10 workers, over a run of some length: Lambda wins on time
    (no VM start-up), not on cost."""
    workload = _higgs(algorithm, HIGGS_BINARY_BYTES, epochs=HIGGS_LONG_EPOCHS)
    advice = advise(workload, workers=[10], memory_mb=[PAPER_LAMBDA_MB])
    faas, cpu, _ = _split(advice)
    assert faas and cpu
    fastest_faas, fastest_iaas = min(r.time_s for r in faas), min(r.time_s for r in cpu)
    cheapest_faas, cheapest_iaas = min(r.cost for r in faas), min(r.cost for r in cpu)
    assert fastest_faas < 0.5 * fastest_iaas  # every channel beats every CPU cluster ...
    assert max(r.time_s for r in faas) < fastest_iaas
    assert cheapest_faas >= 0.8 * cheapest_iaas  # ... but the cheapest cluster costs about as little


def test_a_short_lr_run_on_higgs_binary_shards_makes_faas_cheaper_too() -> None:
    """The cost finding depends on the job's length: 10 epochs on LambdaML's 1.3 GB of binary shards
    take seconds, and then the VMs' billed start-up is nearly all of their cost, so Lambda is cheaper too."""
    advice = advise(_higgs("admm", HIGGS_BINARY_BYTES), workers=[10], memory_mb=[PAPER_LAMBDA_MB])
    faas, cpu, _ = _split(advice)
    assert min(r.cost for r in faas) < 0.5 * min(r.cost for r in cpu)
    iaas = min(cpu, key=lambda r: r.cost)
    assert iaas.time["startup_s"] > 0.9 * iaas.time_s


def test_the_papers_8_gb_of_text_evens_the_cost_of_a_short_run() -> None:
    """Read as the paper's workers read it (8 GB of text), loading is most of Lambda's bill: the
    same 10 epochs cost about as much as the cheapest cluster, which loads over a faster network."""
    advice = advise(_higgs("admm", HIGGS_TEXT_BYTES), workers=[10], memory_mb=[PAPER_LAMBDA_MB])
    faas, cpu, _ = _split(advice)
    assert min(r.time_s for r in faas) < 0.5 * min(r.time_s for r in cpu)
    cheapest = min(faas, key=lambda r: r.cost)
    assert cheapest.cost >= 0.8 * min(r.cost for r in cpu)
    assert cheapest.time["load_s"] > 0.5 * cheapest.time_s


def test_resnet50_a_gpu_instance_is_faster_and_cheaper_than_lambda() -> None:
    """ResNet-50 on CIFAR-10: one GPU instance beats every Lambda configuration on both time and cost."""
    workload = Workload(
        "resnet50", dataset_bytes=CIFAR10_BYTES, samples=50_000, batch_size=32, epochs=10, optimizer="momentum"
    )
    advice = advise(workload, workers=[1, 2, 5, 10, 20, 50])
    faas, _, gpu = _split(advice)
    single_gpu = [r for r in gpu if r.workers == 1]
    assert faas and single_gpu
    best = min(single_gpu, key=lambda r: r.time_s)
    assert best.time_s < 0.7 * min(r.time_s for r in faas)
    assert best.cost < 0.2 * min(r.cost for r in faas)
    assert max(r.cost for r in single_gpu) < min(r.cost for r in faas)  # any single GPU instance is cheaper
    assert advice.recommended.platform == "iaas"


@pytest.mark.parametrize("channel", ["s3", "memcached", "redis"])
def test_scatter_reduce_beats_allreduce_as_the_model_grows(channel: str) -> None:
    """The aggregator of AllReduce moves W values per round; ScatterReduce spreads that over all workers."""
    profile = aws_profile()
    ratios = []
    for params in (1_000, 100_000, 1_000_000, 10_000_000, 100_000_000):
        workload = Workload("resnet50", params=params, dataset_bytes=1e9, samples=100_000, batch_size=100, epochs=1)
        advice = advise(
            workload, profile, workers=[10], channels=[channel], memory_mb=[PAPER_LAMBDA_MB], instances=["c5.large"]
        )
        ar = advice.best("faas", pattern="allreduce")
        sr = advice.best("faas", pattern="scatter_reduce")
        assert ar is not None and sr is not None
        ratios.append(sr.time["communicate_s"] / ar.time["communicate_s"])
    assert ratios[-1] < 0.5 < ratios[0], ratios  # AllReduce's aggregator becomes the bottleneck
    if channel == "s3":
        # S3 has no shared bottleneck: the aggregator's W-fold traffic is all that differs, and
        # for a tiny model (latency-bound) the patterns are even.
        assert all(b <= a + 1e-9 for a, b in itertools.pairwise(ratios)), ratios
        assert ratios[0] > 0.9 and ratios[-1] < 0.3
