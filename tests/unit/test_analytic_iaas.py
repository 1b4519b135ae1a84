"""The IaaS prediction's terms: one compute rule with FaaS, gloo's ring (its reduce hidden behind
the transfer, none on a GPU), and start-up from the profile where one was measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytic_model import Workload, advise, aws_profile, load_profile, predict_faas, predict_iaas
from analytic_model.calibration import Calibration, ComputeCalibration, Ec2Calibration, FaasCalibration
from analytic_model.collectives import ring_allreduce_s
from analytic_model.compute import parallel_speed
from analytic_model.profile import Host, Profile, save_profile, with_figures

# Small batches: the per-step overhead is most of an LR step, so a rule that leaves it unscaled shows.
HIGGS_SMALL_BATCH = Workload("lr", dataset_bytes=1.28e9, samples=11_000_000, features=28, batch_size=100, epochs=1)
RESNET50 = Workload("resnet50", dataset_bytes=6.1e8, samples=50_000, batch_size=32, epochs=1, optimizer="momentum")


def compute_s(workload: Workload, instance: str, profile: Profile | None = None, workers: int = 1) -> float:
    return predict_iaas(workload, workers, instance, profile or aws_profile()).time["compute_s"]


def test_lr_compute_falls_as_the_instance_grows_by_its_cores() -> None:
    large, middle, largest = (compute_s(HIGGS_SMALL_BATCH, name) for name in ("c5.large", "c5.2xlarge", "c5.9xlarge"))
    assert large > middle > largest
    profile = aws_profile()
    # The per-step overhead scales with the cores as the per-sample work does: the ratio is the cores' alone.
    speedup = parallel_speed(36, profile) / parallel_speed(2, profile)
    assert large / largest == pytest.approx(speedup, rel=1e-9)


def test_faas_and_iaas_share_one_compute_rule() -> None:
    """A Lambda function with 2 vCPUs and a 2-vCPU instance compute one LR round in the same time."""
    profile = aws_profile()
    two_vcpus_mb = 1769 + (10240 - 1769) / 5  # one vCPU at 1,769 MB, six at 10,240 MB
    faas = predict_faas(HIGGS_SMALL_BATCH, 1, "s3", "allreduce", round(two_vcpus_mb), profile)
    iaas = predict_iaas(HIGGS_SMALL_BATCH, 1, "c5.large", profile)
    assert faas.time["compute_s"] == pytest.approx(iaas.time["compute_s"], rel=1e-3)


def test_a_gpu_runs_the_samples_and_its_host_the_steps() -> None:
    """Two GPU instances of one GPU: the one with more host vCPUs pays less per-step overhead."""
    tiny_steps = Workload("resnet50", dataset_bytes=6.1e8, samples=50_000, batch_size=1, epochs=1)
    four, eight = compute_s(tiny_steps, "g4dn.xlarge"), compute_s(tiny_steps, "g4dn.2xlarge")
    assert eight < four
    heavy = Workload("resnet50", dataset_bytes=6.1e8, samples=50_000, batch_size=512, epochs=1)
    assert compute_s(heavy, "g4dn.2xlarge") == pytest.approx(compute_s(heavy, "g4dn.xlarge"), rel=0.02)


def test_a_gpu_instance_pays_no_cpu_reduce_but_a_cpu_one_does_when_summing_is_slow() -> None:
    profile = aws_profile()
    slow_sum = with_figures(profile, {"compute": {"add_Bps": 1e6}})  # far slower than any network
    gpu, gpu_slow = (predict_iaas(RESNET50, 4, "g5.xlarge", p) for p in (profile, slow_sum))
    assert gpu_slow.time["communicate_s"] == gpu.time["communicate_s"]
    ring = ring_allreduce_s(4, RESNET50.vector_bytes(profile.model("resnet50")), 2.5e9 / 8, profile.ec2.ring_latency_s)
    assert gpu.time["communicate_s"] == pytest.approx(gpu.rounds * ring)
    cpu, cpu_slow = (predict_iaas(RESNET50, 4, "c5.4xlarge", p) for p in (profile, slow_sum))
    assert cpu_slow.time["communicate_s"] > 10 * cpu.time["communicate_s"]


def test_gloo_sums_each_chunk_while_the_next_arrives() -> None:
    """A sum faster than the transfer costs nothing; a slower one replaces the transfer in W-1 steps."""
    m, net, latency = 1e8, 1e9, 1e-4
    transfer = ring_allreduce_s(4, m, net, latency)
    assert ring_allreduce_s(4, m, net, latency, reduce_Bps=2 * net) == transfer
    slow = ring_allreduce_s(4, m, net, latency, reduce_Bps=net / 2)
    assert slow == pytest.approx(transfer + 3 * (m / 4 / (net / 2) - m / 4 / net))
    assert ring_allreduce_s(1, m, net, latency, reduce_Bps=1.0) == 0.0


def test_resnet50_on_two_gpus_is_faster_when_the_compute_saved_exceeds_the_ring() -> None:
    """An A10G computes a round of 32 images in about 40 ms; at 25 Gbps the ring of ResNet-50's
    100 MB takes about 33 ms, so halving the rounds saves more than the ring costs."""
    profile = with_figures(aws_profile(), {"instances": {"g5.xlarge": {"network_gbps": 25.0}}})
    one, two = (predict_iaas(RESNET50, w, "g5.xlarge", profile) for w in (1, 2))
    assert two.time["communicate_s"] < one.time["compute_s"] - two.time["compute_s"]
    assert two.time_s < one.time_s
    # On its baseline 2.5 Gbps the ring costs more than the compute it saves, and the model says so.
    base = aws_profile()
    one_slow, two_slow = (predict_iaas(RESNET50, w, "g5.xlarge", base) for w in (1, 2))
    assert two_slow.time_s > one_slow.time_s
    assert two_slow.time["communicate_s"] > one_slow.time["compute_s"] - two_slow.time["compute_s"]


def local_profile(tmp_path: Path, ec2: Ec2Calibration | None) -> Profile:
    """A local profile as ``lambdaml calibrate`` writes it (2 shared cores), with or without its gloo group."""
    measured = Calibration(
        target="local", source="measured here", created="2026-12-01T00:00:00+00:00",
        host=Host(name="vm", cores=2, machine="x86_64", python="3.12"), channels={},
        compute=ComputeCalibration(measured={}, add_Bps=4e9), faas=FaasCalibration(2, {"numpy": 0.3}, 0.1), ec2=ec2,
    )  # fmt: skip
    return load_profile(save_profile(measured, tmp_path / "local.json"))


def test_a_local_profile_s_measured_start_up_and_loopback_are_used(tmp_path: Path) -> None:
    group = Ec2Calibration(startup_s=12.5, unbilled_startup_s=0.0, ring_latency_s=3e-4, network_Bps=5e8, wait_s=2e-3)
    local = local_profile(tmp_path, group)
    p = predict_iaas(RESNET50, 4, "c5.4xlarge", local)
    assert p.time["startup_s"] == 12.5
    vector = RESNET50.vector_bytes(local.model("resnet50"))
    add_Bps = 4e9 * 0.5  # one rank's share of the two cores
    # Four ranks on two cores: each ring step waits for a core, twice the two-rank latency; each
    # round also pays the measured wait for a delayed peer.
    assert p.round_s - p.time["compute_s"] / p.rounds == pytest.approx(
        ring_allreduce_s(4, vector, 5e8, 2 * 3e-4, add_Bps) + 2e-3, rel=1e-9
    )
    two = predict_iaas(RESNET50, 2, "c5.4xlarge", local)
    assert two.round_s - two.time["compute_s"] / two.rounds == pytest.approx(
        ring_allreduce_s(2, vector, 5e8, 3e-4, 4e9) + 2e-3, rel=1e-9
    )
    # Billed from the start, as the iaas-local backend bills a run: its whole wall time, a minute at least.
    assert p.costs["ec2"] == pytest.approx(4 * max(60.0, p.time_s) * 0.68 / 3600, rel=1e-9)
    # Four ranks on two cores compute at half a core each, whatever instance type is priced.
    assert predict_iaas(RESNET50, 4, "c5.large", local).time["compute_s"] == p.time["compute_s"]
    # Without a measured group, a local profile keeps AWS's start-up; the shipped defaults keep 90 s.
    assert predict_iaas(RESNET50, 4, "c5.4xlarge", local_profile(tmp_path, None)).time["startup_s"] == 90.0
    assert predict_iaas(RESNET50, 4, "c5.4xlarge", aws_profile()).time["startup_s"] == 90.0


def test_the_advice_plot_names_the_profile_and_the_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figure = pytest.importorskip("matplotlib.figure")
    titles: list[str] = []
    savefig = figure.Figure.savefig

    def keep_title(fig: object, *args: object, **kwargs: object) -> None:
        titles.append(fig.axes[0].get_title())  # type: ignore[attr-defined]
        savefig(fig, *args, **kwargs)

    monkeypatch.setattr(figure.Figure, "savefig", keep_title)
    group = Ec2Calibration(startup_s=12.5, unbilled_startup_s=0.0, ring_latency_s=3e-4, network_Bps=5e8, wait_s=2e-3)
    lr = Workload("lr", dataset_bytes=4e6, samples=40_000, features=28, epochs=1)
    advise(lr, local_profile(tmp_path, group), workers=[2], channels=["s3"], instances=["c5.large"]).plot(
        tmp_path / "local.png"
    )
    advise(lr, workers=[2], channels=["s3"], instances=["c5.large"], region="eu-west-1").plot(tmp_path / "aws.png")
    assert titles[0].endswith("(local profile, us-east-1 prices)")
    assert titles[1].endswith("(aws profile, eu-west-1 prices)")
