"""JobSpec and its parts, loaded from YAML or JSON and validated on load.

Every part forbids unknown keys, so a typo is an error naming the field rather than a
silently ignored setting. Plug-in names are checked against their registries here, so a
job with an unknown algorithm fails before any worker starts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lambdaml import keys
from lambdaml.errors import ConfigError
from lambdaml.registry import Registry


def _known_name(registry: Registry[Any], name: str) -> str:
    try:
        registry.get(name)
    except ConfigError as exc:  # reported by pydantic with the field's path
        raise ValueError(str(exc)) from None
    return name


class _Spec(BaseModel):
    # strict: "4" or true is not a worker count; a typed job file says what it means
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


ChannelKind = Literal["s3", "redis", "memcached", "dynamodb", "memory"]


class StorageSpec(_Spec):
    """Where datasets, job records and results live (an S3 bucket)."""

    bucket: str = Field("lambdaml-data", min_length=3, max_length=63)
    endpoint_url: str | None = None  # None: AWS, or AWS_ENDPOINT_URL_S3 from the environment
    region: str = "us-east-1"
    connect_timeout_s: float = Field(5.0, gt=0, le=300)


class ChannelSpec(_Spec):
    """The storage channel workers synchronize through."""

    kind: ChannelKind = "s3"
    bucket: str | None = Field(None, min_length=3, max_length=63)  # s3
    table: str | None = Field(None, min_length=3, max_length=255)  # dynamodb
    endpoint_url: str | None = None  # s3, dynamodb
    region: str = "us-east-1"
    host: str = "127.0.0.1"  # redis, memcached
    port: int | None = Field(None, ge=1, le=65535)
    max_item_bytes: int | None = Field(None, ge=1024)  # override the backend's item limit
    tls: bool = False  # redis: ElastiCache with transit encryption speaks TLS only
    connect_timeout_s: float = Field(5.0, gt=0, le=300)

    @model_validator(mode="after")
    def _needs(self) -> ChannelSpec:
        if self.kind == "s3" and not self.bucket:
            raise ValueError("an s3 channel needs 'bucket'")
        if self.kind == "dynamodb" and not self.table:
            raise ValueError("a dynamodb channel needs 'table'")
        return self


class ModelSpec(_Spec):
    name: str = "lr"
    l2: float = Field(0.0, ge=0, le=1e6)
    k: int = Field(8, ge=1, le=100_000)  # kmeans: clusters
    hidden: list[int] = Field(default_factory=lambda: [128], min_length=1, max_length=16)  # mlp: layer widths
    width: float = Field(1.0, gt=0, le=8)  # mobilenet, resnet18: channel multiplier (1.0 = the paper's)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        from lambdaml.models import MODELS

        return _known_name(MODELS, name)


class CompressionSpec(_Spec):
    """How workers compress what they send (``algorithm.compression``)."""

    name: str = "onebit"  # identity, onebit, qsgd, uint8, topk
    levels: int = Field(16, ge=1, le=32767)  # qsgd: quantization levels
    ratio: float = Field(0.01, gt=0, le=1)  # topk: fraction of the entries sent
    # Error feedback (send what earlier compression dropped): on by default where it applies
    # (ga_sgd, ma_sgd, onebit_adam); the decentralized methods compensate in their own way.
    error_feedback: bool | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        from lambdaml.compression import COMPRESSORS

        return _known_name(COMPRESSORS, name)


class AlgorithmSpec(_Spec):
    name: str = "ga_sgd"
    lr: float = Field(0.1, gt=0, le=1e3)
    batch_size: int = Field(100, ge=1, le=10_000_000)
    epochs: int = Field(5, ge=1, le=100_000)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    shuffle: bool = True
    optimizer: Literal["sgd", "momentum", "adam"] = "sgd"
    momentum: float = Field(0.9, ge=0, lt=1)
    rho: float = Field(0.1, gt=0, le=1e6)  # admm: penalty weight
    l1: float = Field(0.0, ge=0, le=1e6)  # admm: l1 on the consensus variable, by soft-threshold
    local_epochs: int = Field(1, ge=1, le=10_000)  # ma_sgd and admm: local passes between averagings
    compression: CompressionSpec | None = None  # None: uncompressed (onebit_adam: onebit)
    warmup_steps: int = Field(100, ge=1, le=100_000_000)  # onebit_adam: plain Adam steps before freezing v
    gamma: float = Field(0.5, gt=0, le=1)  # choco_sgd: consensus step size

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        from lambdaml.algorithms import ALGORITHMS

        return _known_name(ALGORITHMS, name)

    @field_validator("lr", mode="before")
    @classmethod
    def _finite(cls, lr: object) -> object:
        if isinstance(lr, float) and not math.isfinite(lr):
            raise ValueError("must be a finite number")
        return lr

    @model_validator(mode="after")
    def _relaxations(self) -> AlgorithmSpec:
        from lambdaml.algorithms import ALGORITHMS

        kind = ALGORITHMS.get(self.name)
        compression = self.compression
        if compression is not None and kind.compression == "none":
            hint = "; use dcd_psgd, ecd_psgd or choco_sgd" if kind.decentralized else ""
            raise ValueError(f"algorithm {self.name!r} does not compress what it sends{hint}")
        if compression is not None and compression.error_feedback and kind.decentralized:
            raise ValueError(f"error_feedback does not apply to {self.name!r}, which compensates compression itself")
        if self.optimizer not in kind.optimizers:
            raise ValueError(f"optimizer {self.optimizer!r} does not apply to algorithm {self.name!r}")
        return self

    @property
    def compression_spec(self) -> CompressionSpec | None:
        """The compression to use: the spec's, or the algorithm's own default (onebit_adam: onebit)."""
        from lambdaml.algorithms import ALGORITHMS

        if self.compression is None and ALGORITHMS.get(self.name).compression == "required":
            return CompressionSpec()
        return self.compression


class SyncSpec(_Spec):
    protocol: Literal["bsp", "asp", "ssp"] = "bsp"
    pattern: str = "allreduce"
    timeout_s: float = Field(120.0, gt=0, le=86_400)  # longest wait for the other workers
    staleness: int = Field(4, ge=0, le=1_000_000)  # ssp: how many pushes a worker may run ahead

    @field_validator("pattern")
    @classmethod
    def _known(cls, pattern: str) -> str:
        from lambdaml.comm import PATTERNS

        return _known_name(PATTERNS, pattern)


class RuntimeSpec(_Spec):
    """How a worker survives Lambda's time limit and crashes."""

    checkpoint_every: int = Field(50, ge=1, le=1_000_000)  # rounds between checkpoints
    margin_s: float = Field(10.0, ge=0, le=600)  # stop and continue this long before the deadline
    max_invocations: int = Field(100, ge=1, le=100_000)  # continuations and resumes per worker


class JobSpec(_Spec):
    """A whole training job, as written in a job file."""

    name: str = "job"
    workers: int = Field(4, ge=1, le=1024)
    dataset: str
    storage: StorageSpec = StorageSpec()
    channel: ChannelSpec = ChannelSpec(kind="s3", bucket="lambdaml-comm")
    model: ModelSpec = ModelSpec()
    algorithm: AlgorithmSpec = AlgorithmSpec()
    sync: SyncSpec = SyncSpec()
    runtime: RuntimeSpec = RuntimeSpec()

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        try:
            return keys.check_name(name, "job name")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, name: str) -> str:
        try:
            return keys.check_name(name, "dataset name")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _combination(self) -> JobSpec:
        from lambdaml.algorithms import ALGORITHMS

        algorithm = self.algorithm.name
        if self.sync.protocol != "bsp" and not ALGORITHMS.get(algorithm).supports_async:
            raise ValueError(f"algorithm {algorithm!r} runs only under protocol 'bsp', not {self.sync.protocol!r}")
        if self.sync.protocol != "bsp" and self.algorithm.compression is not None:
            raise ValueError(f"compression runs under protocol 'bsp' only, not {self.sync.protocol!r}")
        if (algorithm == "kmeans") != (self.model.name == "kmeans"):
            raise ValueError("the kmeans algorithm and the kmeans model go together")
        return self

    def to_json(self) -> str:
        return self.model_dump_json()


def _format_errors(source: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]).encode("unicode_escape").decode("ascii") or "(top level)"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict):
            message += f" (got {err['input']!r})"
        parts.append(f"{field}: {message}")
    return f"{source}: " + "; ".join(parts)


def parse_job(data: Any, source: str = "job") -> JobSpec:
    """Validate a mapping (from YAML, JSON or an event) into a JobSpec; raises ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a job must be a mapping of fields, got {type(data).__name__}")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def load_job(path: str | Path) -> JobSpec:
    """Read and validate a job file (.yaml, .yml or .json)."""
    return parse_job(read_job_file(path), str(path))


def read_job_file(path: str | Path) -> Any:
    """A job file's content, parsed but not yet validated (``--stack`` fills in resources first)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"job file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read job file {str(path)!r}: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(f"{path}: not valid YAML ({where}{problem})") from None
    return data
