"""The channel part of a job file: which store workers synchronize through, and how to reach it.

``ChannelSpec`` holds what every channel takes; each kind has a model of its own, a subclass
named by its catalogue description (``ChannelInfo.spec``; the built-in ones are in
``lambdaml/channels/kinds/``). A mapping validated as ``ChannelSpec``, and ``ChannelSpec(kind=...,
...)`` itself, give the model of the kind it names, so a plug-in's channel checks its own fields
like a built-in one. The parts below (``AwsServiceSpec``, ``ServerSpec``) are what kinds reached
the same way share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from pydantic import Field, ModelWrapValidatorHandler, field_validator, model_validator

from lambdaml import catalogue
from lambdaml.config.base import Spec, SpecModels, known_name, refuse_literal_secrets
from lambdaml.config.urls import checked_endpoint_url, refuse_url_credentials
from lambdaml.errors import ConfigError

#: A channel kind: any name the catalogue knows (``catalogue.CHANNELS``).
ChannelKind = str


class AuthSpec(Spec):
    """Where a channel's credentials are kept (never the credentials themselves).

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


def spec_model(kind: str) -> type[ChannelSpec]:
    """The job-file model of the channel kind ``kind`` (loaded from its description's path)."""
    return SPEC_MODELS.model(kind)


#: The fields the one model of earlier versions held for every kind, with their defaults. It took
#: each with any kind, and every job record and result it stored holds them all: another kind's
#: are still accepted and ignored, as they always were, except those that secure the connection
#: (by the field a refusal names), or a job would run less safely than its file says. Read on a
#: kind without them, they answer these defaults, as that model did.
_FLAT_SPEC_FIELDS: dict[str, object] = {
    "bucket": None,
    "table": None,
    "endpoint_url": None,
    "region": "us-east-1",
    "host": "127.0.0.1",
    "port": None,
    "auth": None,
    "tls": False,
    "tls_ca_file": None,
}
_SECURING = {"auth": "auth", "tls": "tls", "tls_ca_file": "tls"}


def _without_others_fields(model: type[ChannelSpec], data: Mapping[str, object]) -> dict[str, object]:
    kind = data.get("kind", model.model_fields["kind"].default)
    for key, named in _SECURING.items():
        if key not in model.model_fields and data.get(key, _FLAT_SPEC_FIELDS[key]) != _FLAT_SPEC_FIELDS[key]:
            raise ValueError(f"{named!r} applies to {_kinds_with(named)} channels, not {kind}")
    return {key: value for key, value in data.items() if key in model.model_fields or key not in _FLAT_SPEC_FIELDS}


def _kinds_with(field: str) -> str:
    """The channel kinds whose model has ``field``, in words: "a, b and c"."""
    kinds = []
    for kind in catalogue.CHANNELS:
        with contextlib.suppress(ConfigError):  # a plug-in's model that does not load: not this refusal's to say
            if field in spec_model(kind).model_fields:
                kinds.append(kind)
    return " and ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)


class ChannelSpec(Spec):
    """The storage channel workers synchronize through: what every kind takes."""

    kind: str = "s3"  # a channel of the catalogue's
    max_item_bytes: int | None = Field(None, ge=1024)  # override the backend's item limit
    connect_timeout_s: float = Field(5.0, gt=0, le=300)
    # Every value is bound to its key; "mac" also authenticates it with a per-job key, so a
    # party that can write the store cannot forge one. "auto": mac where the store admits clients
    # that do not authenticate (a cache without auth, or with auth on a server that lets anonymous
    # clients in: checked as a job starts), bound elsewhere.
    integrity: Literal["auto", "bound", "mac"] = "auto"

    _refuse = model_validator(mode="before")(refuse_literal_secrets)
    _no_credentials = model_validator(mode="before")(refuse_url_credentials)

    def __new__(cls, *args: Any, **data: Any) -> Self:
        """``ChannelSpec(kind="redis", port=6380)`` is a Redis spec, as the same mapping in a job file is."""
        return cast(Self, super().__new__(SPEC_MODELS.for_data(cls, data)))

    def __init__(self, **data: Any) -> None:  # any kind's fields: checked by the model of the kind named
        super().__init__(**data)

    @model_validator(mode="wrap")
    @classmethod
    def _as_kind_model(cls, data: Any, handler: ModelWrapValidatorHandler[ChannelSpec]) -> ChannelSpec:
        return SPEC_MODELS.validate(cls, data, handler, _without_others_fields)

    if not TYPE_CHECKING:  # lambdaml's own code reads only its kind's fields: mypy holds it to them

        def __getattr__(self, name: str) -> Any:
            if name in _FLAT_SPEC_FIELDS:
                return _FLAT_SPEC_FIELDS[name]
            return super().__getattr__(name)

    @field_validator("kind")
    @classmethod
    def _known(cls, kind: str) -> str:
        return known_name(catalogue.CHANNELS, "channel", kind)

    @model_validator(mode="after")
    def _own_model(self) -> Self:
        try:
            model = spec_model(self.kind)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if model is not type(self):
            raise ValueError(f"a {self.kind} channel takes a {model.__name__}, not a {type(self).__name__}")
        return self

    @classmethod
    def of(cls, spec: ChannelSpec) -> Self:
        """``spec`` as this model: a channel class checks the spec it is built from with it."""
        if not isinstance(spec, cls):
            raise ConfigError(f"a {spec.kind} channel spec is a {type(spec).__name__}, not a {cls.__name__}")
        return spec

    @property
    def credentials_given(self) -> bool:
        """Whether the job gives the store credentials to check (``auth``, where its kind has it)."""
        return False

    @property
    def authenticates_values(self) -> bool:
        """Whether the job's channel values carry a MAC under a per-job key."""
        if self.integrity == "auto":
            return not (catalogue.channel(self.kind).authenticates_clients or self.credentials_given)
        return self.integrity == "mac"

    @property
    def place(self) -> str:
        """Where its store is, in a few words (a bucket, a table, host:port)."""
        return self.kind

    @property
    def store_kind(self) -> str:
        """The kind of the store its values and requests go to: its own (direct: the one it meets through)."""
        return self.kind


SPEC_MODELS: SpecModels[ChannelSpec] = SpecModels("channel", "kind", ChannelSpec, catalogue.channel)


class AwsServiceSpec(ChannelSpec):
    """A channel that is an AWS service, reached at AWS's endpoint or another (moto)."""

    endpoint_url: str | None = None
    region: str = "us-east-1"

    _endpoint = field_validator("endpoint_url")(checked_endpoint_url)


class ServerSpec(ChannelSpec):
    """A channel served at host:port, with credentials where the job gives them."""

    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1, le=65535)  # None: the kind's usual port
    auth: AuthSpec | None = None
    region: str = "us-east-1"  # where a Secrets Manager secret of ``auth`` is

    @property
    def credentials_given(self) -> bool:
        return self.auth is not None

    @property
    def place(self) -> str:
        return f"{self.host}:{self.port}"
