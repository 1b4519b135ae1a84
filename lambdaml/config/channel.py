"""The channel part of a job file: which store workers synchronize through, and how to reach it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from lambdaml.config.base import Spec, refuse_literal_secrets
from lambdaml.config.urls import check_bucket_name, checked_endpoint_url, refuse_url_credentials

ChannelKind = Literal["s3", "redis", "memcached", "dynamodb", "memory"]


class AuthSpec(Spec):
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

    _refuse = model_validator(mode="before")(refuse_literal_secrets)
    _endpoint = field_validator("endpoint_url")(checked_endpoint_url)
    _no_credentials = model_validator(mode="before")(refuse_url_credentials)

    @model_validator(mode="after")
    def _one_source(self) -> AuthSpec:
        if (self.secret_env is None) == (self.secret_id is None):
            raise ValueError("give exactly one of 'secret_env' and 'secret_id'")
        return self


class ChannelSpec(Spec):
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

    _refuse = model_validator(mode="before")(refuse_literal_secrets)
    _endpoint = field_validator("endpoint_url")(checked_endpoint_url)
    _bucket = field_validator("bucket")(check_bucket_name)
    _no_credentials = model_validator(mode="before")(refuse_url_credentials)

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
