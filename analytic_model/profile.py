"""A performance profile: the figures the model predicts from, for one target.

The shipped AWS defaults are a complete profile. ``lambdaml calibrate`` measures a target
(the local machine, a stack) and writes a partial profile of the same shape; loading it
lays its figures over the defaults, so whatever it did not measure (EC2 instances, prices)
keeps its documented value. Every figure keeps where it came from.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from analytic_model.tables import aws_defaults, plain, sources
from lambdaml.errors import ConfigError

PROFILE_VERSION = 1
OPS = ("put", "get")


@dataclass(frozen=True)
class ChannelPerf:
    """How one channel moves values, as seen from one worker and at the shared store.

    A call that moves k values of s bytes takes ``latency + (k - 1) * extra + k * s /
    bandwidth`` on the worker; the store (or, locally, the machine all processes share)
    spends ``server_*_s`` per request and moves at most ``server_*_Bps``.
    """

    kind: str
    latency_put_s: float
    latency_get_s: float
    extra_put_s: float
    extra_get_s: float
    bandwidth_put_Bps: float
    bandwidth_get_Bps: float
    server_put_s: float
    server_get_s: float
    server_delete_s: float | None = None  # the store's time for one batch delete (None: as a put)
    server_put_Bps: float | None = None
    server_get_Bps: float | None = None
    max_item_bytes: int | None = None
    get_batch: int = 1  # keys one get request carries (MGET, multi-get, BatchGetItem); S3 reads one
    put_batch: int = 1  # values one put request carries (pipelined SETs, multi-set); S3 and DynamoDB write one
    wait_s: float = 0.0  # what a worker waiting on two others' values loses beyond the transfers
    wait_per_worker_s: float = 0.0  # ... and per further worker (stragglers, polling, scheduling)
    sr_wait_s: float | None = None  # ScatterReduce's own figures, where calibrated (None: as above)
    sr_wait_per_worker_s: float | None = None
    crowding: float = 0.0  # each further worker moving bytes at once slows a worker's bytes by this fraction
    # A pattern's bytes in real rounds over one worker's transfers crowded as above: on a shared
    # machine a rank moves them while the others poll and compute on the same cores and caches.
    bytes_slowdown: float = 1.0
    sr_bytes_slowdown: float | None = None  # ScatterReduce's own, where calibrated (None: as above)
    step_wake_s: float = 0.0  # a worker's first step after a wait takes this much longer (cold caches)
    cleanup_cpu_s: float = 0.0  # a rank's CPU deleting its previous round's keys: its background thread holds the GIL
    server_growth: float = 0.0  # the store's time per request grows by this fraction per client beyond two
    cpu_share_put: float = 0.0  # share of a put's time that is the worker's own CPU (client code, copies)
    cpu_share_get: float = 0.0
    shared_cores: float | None = None  # cores all workers share (a local target), from faas.shared_cores

    def latency(self, op: str) -> float:
        return float(getattr(self, f"latency_{op}_s"))

    def extra(self, op: str) -> float:
        return float(getattr(self, f"extra_{op}_s"))

    def bandwidth(self, op: str) -> float:
        return float(getattr(self, f"bandwidth_{op}_Bps"))

    def server_request(self, op: str, clients: int = 2) -> float:
        """The store's time per request (``put``, ``get``, ``delete``) while ``clients`` workers use it
        (a local store shares its CPU)."""
        seconds = getattr(self, f"server_{op}_s")
        if seconds is None:  # a delete the profile has no figure for: as a put
            seconds = self.server_put_s
        return float(seconds) * (1.0 + self.server_growth * max(clients - 2, 0))

    def server_bandwidth(self, op: str) -> float | None:
        value = getattr(self, f"server_{op}_Bps")
        return None if value is None else float(value)

    def cpu_stretch(self, op: str, clients: float) -> float:
        """How much longer a call takes while ``clients`` workers make calls at once on cores they share."""
        if not self.shared_cores or clients <= self.shared_cores:
            return 1.0
        share = float(getattr(self, f"cpu_share_{op}"))
        return 1.0 + share * (clients / self.shared_cores - 1.0)

    @property
    def cleanup_delay_s(self) -> float:
        """What a rank's clean-up thread delays it by: its CPU where the rank's own calls need the
        CPU too (their CPU share); the rest overlaps the rank waiting on the store."""
        return self.cleanup_cpu_s * max(self.cpu_share_put, self.cpu_share_get)

    def straggle(self, workers: int, pattern: str = "allreduce") -> float:
        """Expected loss of one wait of ``pattern`` for the values of ``workers`` symmetric workers."""
        base, per_worker = self.wait_s, self.wait_per_worker_s
        if pattern == "scatter_reduce" and self.sr_wait_s is not None:
            base, per_worker = self.sr_wait_s, self.sr_wait_per_worker_s or 0.0
        return base + max(workers - 2, 0) * per_worker

    def slowdown(self, pattern: str) -> float:
        """What ``pattern``'s rounds do to its bytes beyond the transfers and crowding."""
        if pattern == "scatter_reduce" and self.sr_bytes_slowdown is not None:
            return self.sr_bytes_slowdown
        return self.bytes_slowdown

    def round_trips(self, op: str, keys: float) -> float:
        """Requests that carry ``keys`` values: batched where the channel batches them."""
        batch = self.get_batch if op == "get" else self.put_batch
        if batch > 1:
            return float(math.ceil(keys / batch)) if keys > 0 else 0.0
        return keys


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    vcpus: int
    memory_gib: float
    network_gbps: float  # baseline: what sustained all-reduce traffic gets
    burst_gbps: float  # what a short transfer (loading the shard) gets
    gpu: str | None
    gpu_tflops: float  # effective fp32 training throughput of the GPU
    vcpu_speed: float = 1.0  # relative to a Lambda vCPU


@dataclass(frozen=True)
class ModelInfo:
    """Size and work of a model family, as functions of the dataset's features (and k)."""

    name: str
    kind: str  # "linear", "dense" or "conv": which compute rate applies (and whether a GPU helps)
    runtime: str  # "numpy" or "torch": cold start and per-step overhead
    bytes_per_param: int
    params_fixed: int = 0
    params_per_feature: int = 0
    params_per_cluster_feature: int = 0
    flops_fixed: float = 0.0
    flops_per_feature: float = 0.0
    flops_per_cluster_feature: float = 0.0
    flops_per_param: float = 0.0

    @property
    def needs_features(self) -> bool:
        return bool(self.params_per_feature or self.params_per_cluster_feature or self.flops_per_feature)

    def params(self, features: int, k: int) -> int:
        return self.params_fixed + self.params_per_feature * features + self.params_per_cluster_feature * k * features

    def flops(self, features: int, k: int, params: int) -> float:
        return (
            self.flops_fixed
            + self.flops_per_feature * features
            + self.flops_per_cluster_feature * k * features
            + self.flops_per_param * params
        )


@dataclass(frozen=True)
class MeasuredCompute:
    """Per-sample and per-step time of one model measured on the target (one core)."""

    per_sample_s: float
    per_step_s: float
    flops_per_sample: float = 0.0
    kind: str = "linear"
    runtime: str = "numpy"


@dataclass(frozen=True)
class Profile:
    target: str
    data: dict[str, Any]  # the merged figures, plain values
    channels: dict[str, ChannelPerf]
    instances: dict[str, InstanceSpec]
    models: dict[str, ModelInfo]
    measured: dict[str, MeasuredCompute]
    origin: dict[str, str] = field(default_factory=dict)  # dotted path -> where the figure came from

    def figure(self, path: str) -> Any:
        """A figure by dotted path, e.g. ``lambda.vcpu_one_at_mb``."""
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"profile {self.target!r} has no figure {path!r}")
            node = node[part]
        return node

    def number(self, path: str) -> float:
        value = self.figure(path)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"profile {self.target!r}: {path} must be a non-negative number, got {value!r}")
        return float(value)

    def channel(self, kind: str) -> ChannelPerf:
        try:
            return self.channels[kind]
        except KeyError:
            known = ", ".join(sorted(self.channels))
            raise ConfigError(f"unknown channel {kind!r}; the profile knows: {known}") from None

    def instance(self, name: str) -> InstanceSpec:
        try:
            return self.instances[name]
        except KeyError:
            known = ", ".join(sorted(self.instances))
            raise ConfigError(f"unknown instance type {name!r}; known: {known}") from None

    def model(self, name: str) -> ModelInfo:
        try:
            return self.models[name]
        except KeyError:
            known = ", ".join(sorted(self.models))
            raise ConfigError(f"unknown model {name!r}; known: {known}") from None

    @property
    def shared_cores(self) -> float | None:
        """Cores that all worker processes share (a local target); None: each has its own vCPUs."""
        value = self.figure("faas.shared_cores")
        return None if value is None else self.number("faas.shared_cores")


def compute_key(model: str, params: int, sparse: bool = False) -> str:
    """The key a measured model is stored under in a profile."""
    return f"{model}:{params}:{'csr' if sparse else 'dense'}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _build(cls: type[Any], values: dict[str, Any], where: str, **extra: Any) -> Any:
    names = {f.name for f in fields(cls)} - set(extra)
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    try:
        return cls(**extra, **values)
    except TypeError as exc:  # a missing field
        raise ConfigError(f"{where}: {exc}") from None


def from_data(data: dict[str, Any], origin: dict[str, str] | None = None) -> Profile:
    """A profile from plain figures (the defaults, possibly with a calibrated profile laid over)."""
    target = str(data.get("target", "aws"))
    cores = data.get("faas", {}).get("shared_cores")
    channels = {
        kind: _build(ChannelPerf, dict(values), f"profile channels.{kind}", kind=kind, shared_cores=cores)
        for kind, values in data.get("channels", {}).items()
    }
    instances = {
        name: _build(InstanceSpec, dict(values), f"profile instances.{name}", name=name)
        for name, values in data.get("instances", {}).items()
    }
    models = {
        name: _build(ModelInfo, dict(values), f"profile models.{name}", name=name)
        for name, values in data.get("models", {}).items()
    }
    measured = {
        key: _build(MeasuredCompute, dict(values), f"profile compute.measured.{key}")
        for key, values in data.get("compute", {}).get("measured", {}).items()
    }
    profile = Profile(target, data, channels, instances, models, measured, dict(origin or {}))
    for kind, channel in channels.items():  # fail on load, not in the middle of a sweep
        for op in OPS:
            if channel.bandwidth(op) <= 0:
                raise ConfigError(f"profile channels.{kind}.bandwidth_{op}_Bps must be positive")
    return profile


def aws_profile() -> Profile:
    """The shipped AWS defaults as a profile."""
    raw = aws_defaults()
    return from_data(plain(raw), sources(raw))


def load_profile(path: str | Path | None = None) -> Profile:
    """The AWS defaults, with the calibrated profile at ``path`` (if any) laid over them."""
    if path is None:
        return aws_profile()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"profile file {str(path)!r} not found; create one with 'lambdaml calibrate'") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read profile file {str(path)!r}: {exc}") from None
    try:
        measured = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not a JSON profile (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(measured, dict) or measured.get("version") != PROFILE_VERSION:
        raise ConfigError(f"{path}: not a lambdaml profile of version {PROFILE_VERSION}")
    raw = aws_defaults()
    origin = sources(raw)
    note = str(measured.get("_source", f"measured, {path}"))
    origin.update(dict.fromkeys(_leaf_paths(plain(measured)), note))
    return from_data(_merge(plain(raw), plain(measured)), origin)


def with_figures(profile: Profile, changes: dict[str, Any], why: str = "changed by the caller") -> Profile:
    """The profile with some figures replaced (a what-if: ``{"ec2": {"startup_s": 30}}``)."""
    origin = {**profile.origin, **dict.fromkeys(_leaf_paths(changes), why)}
    return from_data(_merge(profile.data, changes), origin)


def save_profile(measured: dict[str, Any], path: str | Path) -> Path:
    """Write a calibrated (partial) profile; ``load_profile`` lays it over the defaults."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": PROFILE_VERSION, **measured}, indent=1, sort_keys=True) + "\n")
    return path


def _leaf_paths(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in _leaf_paths(value, f"{path}.{key}" if path else key)]
    return [path]
