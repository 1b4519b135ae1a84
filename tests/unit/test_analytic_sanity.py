"""Sanity properties of the cost model, over a grid of models, W from 1 to 100, memories,
channels and instance types: what any user would take for granted of its answers."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from analytic_model import Prediction, Workload, aws_profile, predict_faas, predict_iaas
from analytic_model import prediction as prediction_module
from analytic_model.profile import Profile
from analytic_model.tables import prices

WORKLOADS = {
    "lr": Workload("lr", dataset_bytes=1.3e9, samples=11_000_000, features=28, epochs=10, batch_size=1000),
    "mlp": Workload("mlp", dataset_bytes=2e8, samples=60_000, features=784, epochs=10, batch_size=128),
    "kmeans": Workload(
        "kmeans", dataset_bytes=1.3e9, samples=11_000_000, features=28, algorithm="kmeans", epochs=10, k=10
    ),
    "resnet50": Workload("resnet50", dataset_bytes=1.5e8, samples=50_000, epochs=1, batch_size=64),
}
# Compressed and decentralized: predicted on FaaS only (the iaas backends run BSP collectives).
FAAS_ONLY = {
    "lr_onebit": replace(WORKLOADS["lr"], compression="onebit"),
    "mlp_onebit_adam": replace(WORKLOADS["mlp"], algorithm="onebit_adam", optimizer="adam"),
    "lr_choco_sgd": replace(WORKLOADS["lr"], algorithm="choco_sgd", compression="qsgd"),
}
WORKERS = (1, 2, 4, 10, 50, 100)
MEMORIES = (1024, 3008, 10240)
CHANNELS = ("s3", "redis", "memcached", "dynamodb")
PATTERNS = ("allreduce", "scatter_reduce")
INSTANCES = ("c5.large", "c5.4xlarge", "m5.xlarge", "g4dn.xlarge", "g5.xlarge", "p3.2xlarge")
# Past any job a user would run: a year, and a million dollars.
MOST_S, MOST_DOLLARS = 365 * 86400.0, 1e6


def faas_grid() -> list[tuple[str, int, int, str, str]]:
    return [
        (model, workers, memory, channel, pattern)
        for model in ("lr", "kmeans", "mlp", *FAAS_ONLY)
        for workers in WORKERS
        for memory in MEMORIES
        for channel in CHANNELS
        for pattern in PATTERNS
    ]


def iaas_grid() -> list[tuple[str, int, str]]:
    return [(model, workers, instance) for model in WORKLOADS for workers in WORKERS for instance in INSTANCES]


def faas(profile: Profile, model: str, workers: int, memory: int, channel: str, pattern: str) -> Prediction:
    return predict_faas({**WORKLOADS, **FAAS_ONLY}[model], workers, channel, pattern, memory, profile)


def iaas(profile: Profile, model: str, workers: int, instance: str) -> Prediction:
    return predict_iaas(WORKLOADS[model], workers, instance, profile)


def faster_channels(profile: Profile, factor: float) -> Profile:
    channels = {
        kind: replace(
            perf,
            bandwidth_put_Bps=perf.bandwidth_put_Bps * factor,
            bandwidth_get_Bps=perf.bandwidth_get_Bps * factor,
            server_put_Bps=None if perf.server_put_Bps is None else perf.server_put_Bps * factor,
            server_get_Bps=None if perf.server_get_Bps is None else perf.server_get_Bps * factor,
        )
        for kind, perf in profile.channels.items()
    }
    instances = {name: replace(i, network_gbps=i.network_gbps * factor, burst_gbps=i.burst_gbps * factor)
                 for name, i in profile.instances.items()}  # fmt: skip
    return replace(profile, channels=channels, instances=instances)


def test_no_prediction_is_nan_negative_or_past_a_bound() -> None:
    profile = aws_profile()
    for args in faas_grid():
        p = faas(profile, *args)
        for name, value in {"time": p.time_s, "cost": p.cost, **p.time}.items():
            assert math.isfinite(value) and value >= 0, (args, name, value)
        assert p.time_s < MOST_S and p.cost < MOST_DOLLARS, args
    for iargs in iaas_grid():
        q = iaas(profile, *iargs)
        for name, value in {"time": q.time_s, "cost": q.cost, **q.time}.items():
            assert math.isfinite(value) and value >= 0, (iargs, name, value)
        assert q.time_s < MOST_S and q.cost < MOST_DOLLARS, iargs


def test_time_never_rises_when_only_bandwidth_rises() -> None:
    profile = aws_profile()
    faster = faster_channels(profile, 2.0)
    for args in faas_grid():
        slow, fast = faas(profile, *args), faas(faster, *args)
        assert fast.time_s <= slow.time_s * (1 + 1e-12), args
    for iargs in iaas_grid():
        slow, fast = iaas(profile, *iargs), iaas(faster, *iargs)
        assert fast.time_s <= slow.time_s * (1 + 1e-12), iargs


def test_cost_never_falls_when_only_prices_rise(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = aws_profile()
    base = {args: faas(profile, *args) for args in faas_grid()}
    ibase = {args: iaas(profile, *args) for args in iaas_grid()}

    def dearer(region: str) -> dict[str, Any]:
        def scale(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: scale(v) for k, v in value.items()}
            return value * 1.5 if isinstance(value, int | float) and not isinstance(value, bool) else value

        return scale(prices(region))

    monkeypatch.setattr(prediction_module, "prices", dearer)
    for args, before in base.items():
        assert faas(profile, *args).cost >= before.cost, args
    for iargs, ibefore in ibase.items():
        assert iaas(profile, *iargs).cost >= ibefore.cost, iargs


def test_more_gpu_workers_are_slower_only_where_communication_outweighs_the_compute_saved() -> None:
    profile = aws_profile()
    for model in ("mlp", "resnet50"):
        for instance in ("g4dn.xlarge", "g5.xlarge", "p3.2xlarge"):
            one = iaas(profile, model, 1, instance)
            for workers in WORKERS[1:]:
                many = iaas(profile, model, workers, instance)
                if many.time_s <= one.time_s:
                    continue
                saved = one.time["compute_s"] - many.time["compute_s"]
                assert many.time["communicate_s"] > saved, (model, instance, workers, many.time, one.time)
