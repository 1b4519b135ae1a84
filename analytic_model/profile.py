"""A performance profile: the figures the model predicts from, for one target, as typed records.

The shipped AWS defaults are a complete profile. ``lambdaml calibrate`` measures a target
(the local machine, a stack) and writes a partial profile of the same shape; loading it
lays its figures over the defaults, so whatever it did not measure (EC2 instances, prices)
keeps its documented value. Every figure keeps where it came from. JSON (plain dicts) is
only what the files hold: ``Profile.from_json`` reads it, ``Profile.to_json`` writes it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from analytic_model.channel_perf import ChannelPerf
from analytic_model.records import INTERNAL, KEY, Reader, json_name, to_json
from analytic_model.tables import aws_defaults, plain, sources
from analytic_model.uncertainty import Uncertainty
from lambdaml.errors import ConfigError

PROFILE_VERSION = 1
OPS = ("put", "get")

__all__ = ["ChannelPerf", "Profile", "aws_profile", "compute_key", "load_profile", "save_profile", "with_figures"]


@dataclass(frozen=True)
class InstanceSpec:
    name: str = field(metadata=KEY)
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

    name: str = field(metadata=KEY)
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
    # Multiclass linear models: a weight per feature and class, and a bias per class.
    params_per_class_feature: int = 0
    params_per_class: int = 0
    flops_per_class_feature: float = 0.0

    @property
    def needs_features(self) -> bool:
        return bool(
            self.params_per_feature
            or self.params_per_cluster_feature
            or self.flops_per_feature
            or self.params_per_class_feature
        )

    def params(self, features: int, k: int, classes: int = 2) -> int:
        per_class = self.params_per_class_feature * features + self.params_per_class
        return (
            self.params_fixed
            + self.params_per_feature * features
            + self.params_per_cluster_feature * k * features
            + per_class * classes
        )

    def flops(self, features: int, k: int, params: int, classes: int = 2) -> float:
        return (
            self.flops_fixed
            + self.flops_per_feature * features
            + self.flops_per_cluster_feature * k * features
            + self.flops_per_class_feature * classes * features
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
    nnz_per_row: float = 0.0  # a sparse probe's mean non-zeros a row (0: dense, or not recorded)


@dataclass(frozen=True)
class LambdaFigures:
    """The function's limits and what the runtime does on it."""

    vcpu_one_at_mb: float
    max_vcpus: float
    max_memory_mb: float
    min_memory_mb: float
    timeout_s: float
    continuation_margin_s: float
    checkpoint_every: int | None  # rounds between checkpoints (None: never, as local processes)
    runtime_memory_mb: Mapping[str, float]  # per runtime: numpy, torch (resident before the data)
    data_memory_factor: float  # resident bytes per byte of the worker's binary shard
    init_billed: bool


@dataclass(frozen=True)
class FaasFigures:
    """Starting workers and loading their data."""

    cold_start_s: Mapping[str, float]  # per runtime: numpy, torch
    invoke_s: float
    warm_start_s: float
    shared_cores: float | None  # cores all worker processes share (a local target); None: own vCPUs each
    network_Bps: float
    load_latency_s: float
    # After an epoch a worker records it and reads its job's cancel key on the data store, at once.
    heartbeat_s: float
    heartbeat_per_worker_s: float  # ... longer by this per further worker beating at once (a shared local store)
    heartbeat_every_s: float  # ... but only once this long has passed since its last beat (0: every epoch)
    # Larger functions' network (``network.lambda_network_Bps``): from ``network_Bps`` at
    # ``network_scaled_from_mb`` up to ``network_scaled_max_Bps`` at the largest memory; None: flat.
    network_scaled_from_mb: float | None = None
    network_scaled_from_Bps: float | None = None
    network_scaled_max_Bps: float | None = None
    network_scaled_in_vpc: bool = False  # whether a function attached to a VPC gets it too


@dataclass(frozen=True)
class CodecPasses:
    """A compressor's CPU in passes of ``ComputeFigures.add_Bps`` over the vector it compresses."""

    compress: float  # with error feedback, into a codec bundle, beyond a plain tensor's encode
    decompress: float  # from a bundle, beyond a plain tensor's decode


@dataclass(frozen=True)
class SparseCompute:
    """A sparse linear model's step on CSR rows, on one core (``lambdaml.data.sparse``): ``X @ w``
    gathers and ``X.T @ r`` scatters each row's non-zeros, once per weight a feature has (a class's
    on a multiclass model), while the gradient's zeroed width, the update and the vector's packing
    pass over every parameter once a step, whatever the rows hold."""

    per_nonzero_s: float  # per non-zero of a row and weight of its feature
    per_row_s: float  # per row beyond its non-zeros (its margin, loss and slope), per weight of a feature
    per_param_step_s: float  # per parameter, once a step
    per_step_s: float  # the rest of a step (Python, the batch's indexing, the collective's call)


@dataclass(frozen=True)
class ComputeFigures:
    vcpu_gflops: Mapping[str, float]  # per model kind
    per_step_s: Mapping[str, float]  # per runtime
    add_Bps: float
    multithread_efficiency: float
    measured: Mapping[str, MeasuredCompute] = field(default_factory=dict)  # by ``compute_key``
    arm64_speed: float = 1.0  # an arm64 (Graviton) Lambda vCPU against an x86_64 one
    # Per compressor, where a calibration measured them (``wire.CODEC_PASSES`` where not).
    codec_passes: Mapping[str, CodecPasses] = field(default_factory=dict)
    # Bytes of a value HMAC-SHA256 hashes a second on one core: sealing and opening a job's
    # authenticated values (``ChannelSpec.authenticates_values``) each hash the value once.
    mac_Bps: float = 5.0e8  # as shipped (aws_defaults.json)
    # Sparse linear models: their work from the rows' non-zeros (None: priced by flops, as dense).
    sparse: SparseCompute | None = None


@dataclass(frozen=True)
class Ec2Figures:
    startup_s: float
    unbilled_startup_s: float
    min_billed_s: float
    ring_latency_s: float
    s3_read_Bps: float
    runtime_memory_mb: float
    network_Bps: float | None = None  # None: each instance's own network; a local profile: its loopback
    wait_s: float = 0.0  # per round, waiting for a delayed peer (a local profile measures it)


@dataclass(frozen=True)
class PollFigures:
    """``wait_for``'s schedule: the first interval, its growth per poll, the longest."""

    initial_s: float
    factor: float
    max_s: float
    channel_initial_s: Mapping[str, float]  # the channels whose first interval is not ``initial_s``


@dataclass(frozen=True)
class RendezvousFigures:
    """A direct channel's rendezvous: the instance its service runs on (priced in ``prices.json``'s
    ``rendezvous``) and the store its workers publish their endpoints on."""

    instance: str
    store: str


@dataclass(frozen=True)
class Host:
    """The machine a calibration ran on."""

    name: str
    cores: int
    machine: str
    python: str


@dataclass(frozen=True)
class Profile:
    """Every figure of one target, with where each came from (``origin``: dotted path -> source)."""

    target: str
    lambda_: LambdaFigures = field(metadata=json_name("lambda"))
    faas: FaasFigures
    compute: ComputeFigures
    channels: Mapping[str, ChannelPerf]
    cache_node: str
    ec2: Ec2Figures
    instances: Mapping[str, InstanceSpec]
    models: Mapping[str, ModelInfo]
    poll: PollFigures
    codec_header_bytes: int
    uncertainty: Uncertainty  # how far a measurement may fall from a prediction
    rendezvous: RendezvousFigures | None = None  # a direct channel's (None: a profile without one)
    created: str | None = None  # a calibrated profile's: when, and on which machine
    host: Host | None = None
    origin: Mapping[str, str] = field(default_factory=dict, compare=False, metadata=INTERNAL)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], over: Profile | None = None, note: str | None = None) -> Profile:
        """A profile from JSON: complete (the shipped defaults, figures with their sources), or
        partial (a saved profile, a what-if) laid over ``over``, its figures noted as from ``note``."""
        values, origin = plain(data), sources(data)
        values.pop("version", None)  # the file's format, checked where the file is read
        if over is not None:
            note = note or str(data.get("_source", "measured"))
            origin = {**over.origin, **dict.fromkeys(_leaf_paths(values), note)}
            values = _merge(over.to_json(), values)
        target = values.get("target", "aws")
        profile = Reader(str(target)).record(cls, {"target": "aws", **values}, origin=origin)
        cores = profile.faas.shared_cores
        channels = {kind: replace(channel, shared_cores=cores) for kind, channel in profile.channels.items()}
        for kind, channel in channels.items():  # fail on load, not in the middle of a sweep
            for op in OPS:
                if channel.bandwidth(op) <= 0:
                    raise ConfigError(f"profile channels.{kind}.bandwidth_{op}_Bps must be positive")
        return replace(profile, channels=channels)

    def to_json(self) -> dict[str, Any]:
        """Every figure as plain JSON values (``from_json`` reads them back)."""
        return to_json(self)

    @cached_property
    def _values(self) -> dict[str, object]:
        return self.to_json()

    def figure(self, path: str) -> Any:
        """A figure by dotted path, e.g. ``lambda.vcpu_one_at_mb``."""
        node: object = self._values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"profile {self.target!r} has no figure {path!r}")
            node = node[part]
        return node

    def number(self, path: str) -> float:
        return float(Reader(self.target).number(self.figure(path), path))

    def keyed(self, table: Mapping[str, float], path: str, key: str) -> float:
        """One entry of a per-kind or per-runtime table, e.g. ``compute.vcpu_gflops`` for ``conv``."""
        try:
            return table[key]
        except KeyError:
            raise ConfigError(f"profile {self.target!r} has no figure {f'{path}.{key}'!r}") from None

    def channel(self, kind: str, *, authenticated: bool = False) -> ChannelPerf:
        """The channel's figures; ``authenticated``: for a job whose values carry a MAC, which its
        workers hash at ``compute.mac_Bps`` on every put and get."""
        try:
            perf = self.channels[kind]
        except KeyError:
            known = ", ".join(sorted(self.channels))
            raise ConfigError(f"unknown channel {kind!r}; the profile knows: {known}") from None
        return replace(perf, mac_Bps=self.compute.mac_Bps) if authenticated else perf

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
    def measured(self) -> Mapping[str, MeasuredCompute]:
        return self.compute.measured

    @property
    def shared_cores(self) -> float | None:
        """Cores that all worker processes share (a local target); None: each has its own vCPUs."""
        return self.faas.shared_cores


def compute_key(model: str, params: int, sparse: bool = False) -> str:
    """The key a measured model is stored under in a profile."""
    return f"{model}:{params}:{'csr' if sparse else 'dense'}"


def _merge(base: dict[str, object], over: Mapping[str, object]) -> dict[str, object]:
    """``over``'s figures laid over ``base``'s (JSON objects: nested ones merged key by key)."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            merged[key] = _merge(below, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _leaf_paths(node: Any, path: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in _leaf_paths(value, f"{path}.{key}" if path else key)]
    return [path]


def aws_profile() -> Profile:
    """The shipped AWS defaults as a profile."""
    return Profile.from_json(aws_defaults())


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
    return Profile.from_json(measured, over=aws_profile(), note=str(measured.get("_source", f"measured, {path}")))


def with_figures(profile: Profile, changes: Mapping[str, object], why: str = "changed by the caller") -> Profile:
    """The profile with some figures replaced (a what-if: ``{"ec2": {"startup_s": 30}}``)."""
    return Profile.from_json(changes, over=profile, note=why)


class _Record(Protocol):
    def to_json(self) -> Mapping[str, object]: ...


def save_profile(measured: _Record | Mapping[str, object], path: str | Path) -> Path:
    """Write a calibrated (partial) profile, typed or its JSON; ``load_profile`` lays it over the defaults."""
    data = measured if isinstance(measured, Mapping) else measured.to_json()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": PROFILE_VERSION, **data}, indent=1, sort_keys=True) + "\n")
    return path
