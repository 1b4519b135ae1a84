"""JobSpec and its parts, loaded from YAML or JSON and validated on load.

Every part forbids unknown keys, so a typo is an error naming the field rather than a
silently ignored setting. Plug-in names and what each plug-in can do are checked against
the catalogue (``lambdaml.catalogue``) here, without importing any plug-in, so a job with an
unknown algorithm fails before any worker starts, and a torch job validates without torch.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lambdaml import catalogue, keys
from lambdaml.errors import ConfigError, brief


def _known_name(entries: Mapping[str, catalogue.Plugin], kind: str, name: str) -> str:
    try:
        catalogue.lookup(entries, kind, name)
    except ConfigError as exc:  # reported by pydantic with the field's path
        raise ValueError(str(exc)) from None
    return name


_ENDPOINT_HINT = "endpoint must be an http(s) URL like http://127.0.0.1:5000"
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")  # botocore's rule: no "_", no leading "-"


def _is_host(host: str, bracketed: bool) -> bool:
    if bracketed:  # [::1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    return len(host) <= 255 and all(_HOST_LABEL.match(label) for label in host.removesuffix(".").split("."))


def _is_endpoint(url: str) -> bool:
    """Whether ``url`` can be an S3, DynamoDB or Secrets Manager endpoint: http(s)://host[:port][/path].

    botocore takes any string and fails deep inside with a traceback (``file:`` included), so
    anything else is refused here, in one line.
    """
    if not url or any(c.isspace() or not c.isprintable() for c in url):  # urlsplit drops some silently
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port out of range or not a number
    except ValueError:
        return False
    if "@" in parts.netloc or parts.query or parts.fragment:  # user:password@, ?query, #fragment
        return False
    host = parts.hostname
    return parts.scheme in ("http", "https") and bool(host) and _is_host(host or "", parts.netloc.startswith("["))


def _has_credentials(url: str) -> bool:
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


#: Credentials in an endpoint URL are refused: boto3 signs with AWS keys and ignores them, and
#: the job file is stored with the job and copied into results, where a password would leak.
_CREDENTIALS = "an endpoint URL never carries credentials (AWS keys come from the environment)"


def _check_endpoint_url(url: str | None) -> str | None:
    """The one validator of every spec's ``endpoint_url``; pydantic adds the field's path and the input."""
    if url is not None and not _is_endpoint(url):
        raise ValueError(_ENDPOINT_HINT)
    return url


def _has_query(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.query or parts.fragment)


def _redacted(url: str) -> str:
    """A URL as an error may show it: its query and fragment (a presigned token, a key) left out."""
    return url.split("?", 1)[0].split("#", 1)[0] + (" (query left out)" if _has_query(url) else "")


def _refuse_url_credentials(data: Any) -> Any:
    # Before the fields, on the whole spec: a field's error would echo its input, password and all.
    if isinstance(data, dict) and isinstance(data.get("endpoint_url"), str) and _has_credentials(data["endpoint_url"]):
        raise ValueError(f"endpoint_url: {_CREDENTIALS}")
    return data


def check_endpoint_url(url: str | None, option: str) -> str | None:
    """An ``--endpoint-url`` option, checked before any client is built; ConfigError otherwise."""
    if url is not None and _has_credentials(url):
        raise ConfigError(f"{option}: {_CREDENTIALS}")
    if url is not None and not _is_endpoint(url):
        raise ConfigError(f"{option}: {_ENDPOINT_HINT} (got {brief(_redacted(url))})")
    return url


#: S3's bucket naming rules (general purpose buckets): what AWS refuses is refused here, in one line.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def check_bucket_name(name: str | None) -> str | None:
    """An S3 bucket name as AWS accepts it, or a ValueError saying which rule it breaks."""
    if name is None:
        return None
    if not _BUCKET.fullmatch(name):
        raise ValueError(
            f"{brief(name)} is not an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    if ".." in name or ".-" in name or "-." in name:
        raise ValueError(f"{brief(name)} is not an S3 bucket name: no '..', '.-' or '-.'")
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        raise ValueError(f"{brief(name)} is not an S3 bucket name: it is formatted as an IP address")
    if name.startswith(_BUCKET_RESERVED_PREFIXES) or name.endswith(_BUCKET_RESERVED_SUFFIXES):
        raise ValueError(f"{brief(name)} is not an S3 bucket name: its prefix or suffix is reserved by AWS")
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

    _endpoint = field_validator("endpoint_url")(_check_endpoint_url)
    _bucket = field_validator("bucket")(check_bucket_name)
    _no_credentials = model_validator(mode="before")(_refuse_url_credentials)


#: Keys that would hold a secret itself. A job file is stored with the job and copied into
#: results, so it may say where a secret is kept (``auth``), never what it is.
_SECRET_FIELDS = frozenset({"password", "passwd", "auth_token", "token", "secret", "credentials", "api_key"})


def _refuse_literal_secrets(data: Any) -> Any:
    if isinstance(data, dict):
        found = sorted(str(k) for k in data if str(k).lower() in _SECRET_FIELDS)
        if found:
            raise ValueError(
                f"{found[0]!r}: a secret never goes in the job file; say where it is kept with "
                "auth: {secret_env: VARIABLE} or auth: {secret_id: SECRETS_MANAGER_ARN_OR_NAME}"
            )
    return data


class AuthSpec(_Spec):
    """Where a cache channel's credentials are kept (never the credentials themselves).

    Exactly one source: ``secret_env`` names an environment variable, ``secret_id`` an AWS
    Secrets Manager secret (name or ARN). The secret is the password, or a JSON object with
    ``password`` (and optionally ``username``), as Secrets Manager generates it.
    """

    username: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[!-~]+$")  # no spaces
    secret_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    secret_id: str | None = Field(None, pattern=r"^[A-Za-z0-9/_+=.@:-]{1,2048}$")
    endpoint_url: str | None = None  # Secrets Manager endpoint (moto locally); None: AWS
    region: str | None = None  # None: the channel's region

    _refuse = model_validator(mode="before")(_refuse_literal_secrets)
    _endpoint = field_validator("endpoint_url")(_check_endpoint_url)
    _no_credentials = model_validator(mode="before")(_refuse_url_credentials)

    @model_validator(mode="after")
    def _one_source(self) -> AuthSpec:
        if (self.secret_env is None) == (self.secret_id is None):
            raise ValueError("give exactly one of 'secret_env' and 'secret_id'")
        return self


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
    tls_ca_file: str | None = Field(None, min_length=1)  # redis: a private CA's PEM (default: the system's CAs)
    auth: AuthSpec | None = None  # redis AUTH, memcached's text-protocol authentication
    connect_timeout_s: float = Field(5.0, gt=0, le=300)
    # Every value is bound to its key; "mac" also authenticates it with a per-job key, so a
    # party that can write the store cannot forge one. "auto": mac where the channel has no
    # authentication of its own (redis and memcached without auth, or with auth on a server that
    # lets anonymous clients in: checked as a job starts), bound elsewhere.
    integrity: Literal["auto", "bound", "mac"] = "auto"

    _refuse = model_validator(mode="before")(_refuse_literal_secrets)
    _endpoint = field_validator("endpoint_url")(_check_endpoint_url)
    _bucket = field_validator("bucket")(check_bucket_name)
    _no_credentials = model_validator(mode="before")(_refuse_url_credentials)

    @property
    def authenticates_values(self) -> bool:
        """Whether the job's channel values carry a MAC under a per-job key."""
        if self.integrity == "auto":
            return self.kind in ("redis", "memcached") and self.auth is None
        return self.integrity == "mac"

    @model_validator(mode="after")
    def _needs(self) -> ChannelSpec:
        if self.kind == "s3" and not self.bucket:
            raise ValueError("an s3 channel needs 'bucket'")
        if self.kind == "dynamodb" and not self.table:
            raise ValueError("a dynamodb channel needs 'table'")
        if self.auth is not None and self.kind not in ("redis", "memcached"):
            raise ValueError(f"'auth' applies to redis and memcached channels, not {self.kind}")
        if (self.tls or self.tls_ca_file) and self.kind != "redis":
            raise ValueError(f"'tls' applies to redis channels, not {self.kind}")
        return self


class ModelSpec(_Spec):
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
        return _known_name(catalogue.MODELS, "model", name)


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
        return _known_name(catalogue.COMPRESSORS, "compressor", name)


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
        return _known_name(catalogue.ALGORITHMS, "algorithm", name)

    @field_validator("lr", mode="before")
    @classmethod
    def _finite(cls, lr: object) -> object:
        if isinstance(lr, float) and not math.isfinite(lr):
            raise ValueError("must be a finite number")
        return lr

    @model_validator(mode="after")
    def _relaxations(self) -> AlgorithmSpec:
        compression = self.compression
        try:  # the catalogue's rule, which the cost model applies too
            catalogue.check_relaxation(
                self.name,
                None if compression is None else compression.name,
                error_feedback=None if compression is None else compression.error_feedback,
                optimizer=self.optimizer,
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def compression_spec(self) -> CompressionSpec | None:
        """The compression to use: the spec's, or the algorithm's own default (onebit_adam: onebit)."""
        if self.compression is None and catalogue.algorithm(self.name).compression == "required":
            return CompressionSpec()
        return self.compression


class SyncSpec(_Spec):
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
            return _known_name(catalogue.PATTERNS, "communication pattern", pattern)
        except ValueError as exc:
            raise ValueError(f"{exc}, or auto") from None


class RuntimeSpec(_Spec):
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


class IaaSSpec(_Spec):
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


#: The tracking URI forms MLflow's client opens: a server, a local store, Databricks.
_TRACKING_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
_TRACKING_HINT = (
    "must be an MLflow tracking URI like http://127.0.0.1:5000, sqlite:///mlflow.db, file:///path/mlruns or databricks"
)


def check_tracking_uri(uri: str) -> str:
    """An MLflow tracking URI: a known scheme, no credentials (the job file is stored with the job)."""
    if uri == "databricks":  # the workspace of the default Databricks profile
        return uri
    if not uri or any(not c.isprintable() for c in uri):  # urlsplit drops tabs and newlines silently
        raise ValueError(_TRACKING_HINT)
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 -- raises on a port out of range or not a number
    except ValueError:
        raise ValueError(_TRACKING_HINT) from None
    scheme = parts.scheme.split("+")[0]  # postgresql+psycopg2://, mysql+pymysql://
    if scheme not in _TRACKING_SCHEMES:
        raise ValueError(_TRACKING_HINT)
    if scheme in ("http", "https") and (
        parts.query or parts.fragment or not _is_host(parts.hostname or "", parts.netloc.startswith("["))
    ):  # a server is host[:port][/path]; a ?token= would be stored with the job
        raise ValueError(_TRACKING_HINT)
    return uri


def _refuse_tracking_credentials(data: Any) -> Any:
    # Before the field, as for endpoints: a field's error would echo its input, password and all.
    if isinstance(data, dict) and isinstance(data.get("mlflow"), str) and _has_credentials(data["mlflow"]):
        raise ValueError(
            "mlflow: a tracking URI never carries credentials (the job file is stored with the job); "
            "MLflow reads a server's from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
        )
    return data


class TrackingSpec(_Spec):
    """Where a finished job is logged as a run; it changes nothing the job computes."""

    mlflow: str | None = None  # an MLflow tracking URI; None: not tracked

    @field_validator("mlflow")
    @classmethod
    def _uri(cls, uri: str | None) -> str | None:
        return None if uri is None else check_tracking_uri(uri)

    _no_credentials = model_validator(mode="before")(_refuse_tracking_credentials)


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
    iaas: IaaSSpec = IaaSSpec()
    tracking: TrackingSpec | None = None  # left out of the job's identity (records.spec_hash)

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
                given = _redacted(given)  # a query may hold a presigned token or a key
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


def read_job_file(path: str | Path) -> Any:
    """A job file's content, parsed but not yet validated (``--stack`` fills in resources first)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"job file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read job file {str(path)!r}: {exc}") from None
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        if kind == "JSON":
            return json.loads(text, object_pairs_hook=_unique_keys)
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: no Python objects
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(f"{path}: not valid {kind} ({where}{problem})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid {kind} (nested too deeply)") from None
    except ValueError as exc:  # a duplicate JSON key, an integer of more than 4,300 digits
        problem = "an integer has more than 4300 digits" if "digits" in str(exc) else str(exc)
        raise ConfigError(f"{path}: not valid {kind} ({problem})") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (json.loads would keep the last silently)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML forbids it; PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"duplicate key {brief(key)}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 core-schema floats, which PyYAML (YAML 1.1) reads as strings when they have no dot
# or an unsigned exponent: 1e-3, 3E-4, 1e5, 2.5e3, -.5. Only forms with a dot or an exponent
# are added, so ints stay ints (and "09", a string today, stays one). No underscores: YAML 1.2
# has none, so "1_0e3" stays a string; PyYAML's own 1.1 resolvers still read 1_000 as the int
# 1000 and 1_000.5 as a float, as before. .inf and .nan are resolved as before.
_YAML12_FLOAT = re.compile(r"^[-+]?(?:(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)$")

# The resolvers are a class-level dict of lists shared with SafeLoader; add_implicit_resolver copies
# them for a subclass in PyYAML 6 but appended to SafeLoader's own lists in older releases. Copying
# here keeps yaml.safe_load (used elsewhere) exactly as PyYAML ships it, whatever the version.
_StrictLoader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))
