"""A whole job: its parts, validated together, and the one-line report of what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, field_validator, model_validator

from lambdaml import catalogue, keys
from lambdaml.config.algorithm import AlgorithmSpec
from lambdaml.config.base import Spec, known_name
from lambdaml.config.channel import ChannelSpec
from lambdaml.config.job_file import read_job_file
from lambdaml.config.urls import (
    check_bucket_name,
    check_tracking_uri,
    checked_endpoint_url,
    redacted_url,
    refuse_tracking_credentials,
    refuse_url_credentials,
)
from lambdaml.errors import ConfigError, brief


class StorageSpec(Spec):
    """Where datasets, job records and results live (an S3 bucket)."""

    bucket: str = Field("lambdaml-data", min_length=3, max_length=63)
    endpoint_url: str | None = None  # None: AWS, or AWS_ENDPOINT_URL_S3 from the environment
    region: str = "us-east-1"
    connect_timeout_s: float = Field(5.0, gt=0, le=300)

    _endpoint = field_validator("endpoint_url")(checked_endpoint_url)
    _bucket = field_validator("bucket")(check_bucket_name)
    _no_credentials = model_validator(mode="before")(refuse_url_credentials)


class ModelSpec(Spec):
    name: str = "lr"
    l2: float = Field(0.0, ge=0, le=1e6)
    k: int = Field(8, ge=1, le=100_000)  # kmeans: clusters
    # mlp: layer widths
    hidden: list[Annotated[int, Field(ge=1, le=65_536)]] = Field(
        default_factory=lambda: [128], min_length=1, max_length=16
    )
    width: float = Field(1.0, gt=0, le=8)  # mobilenet, resnet18: channel multiplier (1.0 = the paper's)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return known_name(catalogue.MODELS, "model", name)


class SyncSpec(Spec):
    protocol: Literal["bsp", "asp", "ssp"] = "bsp"
    pattern: str = "auto"  # auto: the one the cost model predicts fastest (lambdaml.comm.choice)
    # auto, where the model cannot tell patterns apart: rounds each is timed on before the job
    # keeps the fastest (lambdaml.comm.trial); 0: the model's choice alone.
    trial_rounds: int = Field(4, ge=0, le=1_000)
    timeout_s: float = Field(120.0, gt=0, le=86_400)  # longest wait for the other workers
    staleness: int = Field(4, ge=0, le=1_000_000)  # ssp: how many pushes a worker may run ahead

    @field_validator("pattern")
    @classmethod
    def _known(cls, pattern: str) -> str:
        if pattern == "auto":
            return pattern
        try:
            return known_name(catalogue.PATTERNS, "communication pattern", pattern)
        except ValueError as exc:
            raise ValueError(f"{exc}, or auto") from None


#: A job file's word for "let the cost model choose" (``workers``, ``runtime.memory_mb``, ``channel``):
#: ``lambdaml train`` fills it in before the job is validated (``lambdaml.planning``), for a
#: ``--deadline`` or ``--budget``, or as the advisor recommends.
AUTO = "auto"
_CHOSEN = "is chosen by 'lambdaml train' (for --deadline D or --budget B, else as the advisor recommends)"


class RuntimeSpec(Spec):
    """How a worker survives Lambda's time limit and crashes."""

    checkpoint_every: int = Field(50, ge=1, le=1_000_000)  # rounds between checkpoints
    margin_s: float = Field(10.0, ge=0, le=600)  # stop and continue this long before the deadline
    max_invocations: int = Field(100, ge=1, le=100_000)  # continuations and resumes per worker
    # A worker records its epoch and checks for a cancel at most once per second of the attempt
    # (and after its first and last epoch): short epochs would otherwise spend their time, and their
    # requests, on the data store. 0: after every epoch.
    heartbeat_every_s: float = Field(1.0, ge=0, le=3600)
    # A local run is priced as Lambda would bill it at this memory (the template's WorkerMemoryMB).
    memory_mb: int = Field(3008, ge=128, le=10_240)

    @field_validator("memory_mb", mode="before")
    @classmethod
    def _sized(cls, memory_mb: object) -> object:
        if memory_mb == AUTO:
            raise ValueError(f"auto {_CHOSEN}; give megabytes otherwise")
        return memory_mb


class IaaSSpec(Spec):
    """The serverful cluster an IaaS run uses, and is billed as (EC2 on-demand, per second)."""

    instance_type: str = "c5.large"

    @field_validator("instance_type")
    @classmethod
    def _priced(cls, instance_type: str) -> str:
        from analytic_model.tables import price_table  # the shipped price table; pure JSON

        known = {name for region in price_table()["regions"].values() for name in region.get("ec2", {})}
        if instance_type not in known:
            raise ValueError(f"no price for instance type {instance_type!r}; known: {', '.join(sorted(known))}")
        return instance_type


class TrackingSpec(Spec):
    """Where a finished job is logged as a run; it changes nothing the job computes."""

    mlflow: str | None = None  # an MLflow tracking URI; None: not tracked

    @field_validator("mlflow")
    @classmethod
    def _uri(cls, uri: str | None) -> str | None:
        return None if uri is None else check_tracking_uri(uri)

    _no_credentials = model_validator(mode="before")(refuse_tracking_credentials)


class JobSpec(Spec):
    """A whole training job, as written in a job file."""

    name: str = "job"
    workers: int = Field(4, ge=1, le=1024)
    dataset: str
    storage: StorageSpec = StorageSpec()
    # Dumped with its own kind's fields; made when needed, since a kind's model is loaded through the catalogue.
    channel: SerializeAsAny[ChannelSpec] = Field(default_factory=lambda: ChannelSpec(kind="s3", bucket="lambdaml-comm"))
    model: ModelSpec = ModelSpec()
    algorithm: SerializeAsAny[AlgorithmSpec] = AlgorithmSpec()  # dumped with its own algorithm's fields
    sync: SyncSpec = SyncSpec()
    runtime: RuntimeSpec = RuntimeSpec()
    iaas: IaaSSpec = IaaSSpec()
    tracking: TrackingSpec | None = None  # left out of the job's identity (records.spec_hash)

    @field_validator("workers", mode="before")
    @classmethod
    def _counted(cls, workers: object) -> object:
        if workers == AUTO:
            raise ValueError(f"auto {_CHOSEN}; give a count otherwise")
        return workers

    @field_validator("channel", mode="before")
    @classmethod
    def _one_channel(cls, channel: object) -> object:
        if channel == AUTO or isinstance(channel, list):
            raise ValueError(f"a channel to choose (auto, or a list) {_CHOSEN}; give one otherwise")
        return channel

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
        algorithm = self.algorithm.name
        try:  # the catalogue's rule, which the cost model applies too
            catalogue.check_protocol(
                algorithm,
                self.sync.protocol,
                compression_given=self.algorithm.compression is not None,
                compressed=self.algorithm.compression_spec is not None,
                pattern=self.sync.pattern,
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if (algorithm == "kmeans") != (self.model.name == "kmeans"):
            raise ValueError("the kmeans algorithm and the kmeans model go together")
        if self.channel.kind == "direct" and self.sync.protocol != "bsp":
            raise ValueError(f"a direct channel's links carry BSP rounds; {self.sync.protocol} pushes through a store")
        if self.channel.kind == "direct" and self.algorithm.compression_spec is not None:
            raise ValueError("a direct channel's links carry plain values; compressed rounds need a store channel")
        return self

    def to_json(self) -> str:
        return self.model_dump_json()


_MAX_REPORTED = 6  # errors named in the one line; a file of a hundred typos says "and 94 more"


def _format_errors(source: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]).encode("unicode_escape").decode("ascii") or "(top level)"
        if len(field) > 80:  # an unknown key can be as long as the file
            field = f"{field[:60]}...{field[-12:]}"
        message = err["msg"].removeprefix("Value error, ")
        # What was given helps, except under auth, where a mistyped secret may be the secret itself.
        secretive = "auth" in err["loc"][:2]
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif (
            "input" in err and err["type"] not in ("missing",) and not isinstance(err["input"], dict) and not secretive
        ):
            given = err["input"]
            if err["loc"] and err["loc"][-1] == "endpoint_url" and isinstance(given, str):
                given = redacted_url(given)  # a query may hold a presigned token or a key
            message += f" (got {brief(given)})"
        parts.append(f"{field}: {message}")
    if len(parts) > _MAX_REPORTED:
        parts[_MAX_REPORTED:] = [f"and {len(parts) - _MAX_REPORTED} more"]
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
