"""Redis: an in-memory server (ElastiCache on AWS), billed by the hours of its node."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lambdaml.catalogue import ChannelInfo
from lambdaml.config.channel import ServerSpec


class RedisSpec(ServerSpec):
    kind: Literal["redis"] = "redis"
    tls: bool = False  # ElastiCache with transit encryption speaks TLS only
    tls_ca_file: str | None = Field(None, min_length=1)  # a private CA's PEM (default: the system's CAs)


DESCRIPTION = ChannelInfo(
    "redis",
    "lambdaml.channels.redis:RedisChannel",
    spec=f"{__name__}:RedisSpec",
    title="Redis",
    billed_by="node_hours",
    prices="elasticache",
    stack_cache=True,
    stack_cache_secured=True,
    local_server="lambdaml.local.services:start_redis",
)
