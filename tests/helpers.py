"""Helpers shared by contract, integration and end-to-end tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from lambdaml.config import ChannelSpec

CHANNEL_KINDS = ["memory", "s3", "redis", "memcached", "dynamodb"]


@dataclass(frozen=True)
class Services:
    """Endpoints of the real local services the tests run against (started by conftest)."""

    moto_url: str
    redis_port: int
    memcached_port: int


def unique_name(stem: str = "comm") -> str:
    """A fresh bucket/table/prefix name, so tests never see each other's keys."""
    return f"{stem}-{uuid4().hex[:8]}"


def channel_spec(kind: str, services: Services | None, **overrides: Any) -> ChannelSpec:
    """A ChannelSpec for ``kind`` pointing at the local services; s3/dynamodb get a fresh bucket/table."""
    fields: dict[str, Any] = {"kind": kind, "connect_timeout_s": 2.0}
    if kind != "memory":
        if services is None:
            raise ValueError(f"a {kind} channel spec needs the running services")
        if kind == "s3":
            fields.update(bucket=unique_name(), endpoint_url=services.moto_url)
        elif kind == "dynamodb":
            fields.update(table=unique_name(), endpoint_url=services.moto_url)
        elif kind == "redis":
            fields.update(host="127.0.0.1", port=services.redis_port)
        elif kind == "memcached":
            fields.update(host="127.0.0.1", port=services.memcached_port)
        else:
            raise ValueError(f"unknown channel kind {kind!r}; known: {', '.join(CHANNEL_KINDS)}")
    fields.update(overrides)
    return ChannelSpec(**fields)
