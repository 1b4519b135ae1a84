"""Memcached: an in-memory server (ElastiCache on AWS), billed by the hours of its node."""

from __future__ import annotations

from typing import Literal

from lambdaml.catalogue import ChannelInfo
from lambdaml.config.channel import ServerSpec


class MemcachedSpec(ServerSpec):
    kind: Literal["memcached"] = "memcached"


DESCRIPTION = ChannelInfo(
    "memcached",
    "lambdaml.channels.memcached:MemcachedChannel",
    spec=f"{__name__}:MemcachedSpec",
    title="Memcached",
    ordered_writes=True,  # a connection's commands run in order: a value's parts, then its manifest
    billed_by="node_hours",
    prices="elasticache",
    stack_cache=True,
    local_server="lambdaml.local.services:start_memcached",
)
