"""How a cache channel's ElastiCache is billed: node-hours for a stated lifetime, or Serverless.

A node-based cluster is billed per node-hour for as long as it exists, not for the seconds a
job uses it; its lifetime is stated (``hours``) or taken as the job's duration rounded up to
the hour. ElastiCache Serverless bills ECPUs (about one per KB a request moves) and GB-hours of
data stored, at least its engine's minimum. Valkey costs less than Redis OSS either way.
``share`` prices only the job's own node-seconds: what it adds to a stack's cluster that is
there anyway (what a finished job's cost reports unless told otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lambdaml.errors import ConfigError

CACHE_PRICINGS = ("node", "serverless", "share")
CACHE_ENGINES = ("redis", "valkey")
KB = 1024
GB = 2**30


@dataclass(frozen=True)
class CacheBilling:
    """``pricing``: node (per node-hour), serverless, or share (the job's node-seconds); ``hours``:
    the cache's lifetime (None: the job's duration rounded up to the hour); ``engine``: redis (Redis
    OSS) or valkey, for a Redis channel (a Memcached channel is priced as Memcached, whatever the engine)."""

    pricing: str = "node"
    hours: float | None = None
    engine: str = "redis"

    def __post_init__(self) -> None:
        if self.pricing not in CACHE_PRICINGS:
            raise ConfigError(f"unknown cache pricing {self.pricing!r}; known: {', '.join(CACHE_PRICINGS)}")
        if self.engine not in CACHE_ENGINES:
            raise ConfigError(f"unknown cache engine {self.engine!r}; known: {', '.join(CACHE_ENGINES)}")
        if self.hours is not None and (not math.isfinite(self.hours) or self.hours <= 0):
            raise ConfigError(f"cache hours must be a positive number, got {self.hours!r}")

    def lifetime_h(self, wall_s: float) -> float:
        """The hours the cache exists: as stated, and never less than the job it serves."""
        job_h = max(1, math.ceil(wall_s / 3600))
        return job_h if self.hours is None else max(self.hours, wall_s / 3600)

    def engine_of(self, channel: str) -> str:
        """The engine a channel's cache runs: Memcached for memcached, else the one chosen."""
        return "memcached" if channel == "memcached" else self.engine

    def priced(self, channel: str, table: Mapping[str, Mapping[str, float]]) -> bool:
        """Whether one region's prices (``table``) price a channel's cache this way."""
        engine, engines = self.engine_of(channel), table.get("elasticache_engines", {})
        if self.pricing == "serverless":
            return all(f"{engine}_{part}" in engines for part in ("gb_hour", "ecpu", "min_gb"))
        return "elasticache" in table and (engine != "valkey" or "valkey_node_factor" in engines)

    def describe(self, channel: str, node: str, wall_s: float) -> str:
        """What the advice line says is assumed, e.g. ``cache.r7g.large (redis) per node-hour for 1 h ...``."""
        engine = self.engine_of(channel)
        hours = f"{self.lifetime_h(wall_s):g} h"
        lifetime = f"{hours} (the job's time rounded up to the hour)" if self.hours is None else f"{hours} (stated)"
        if self.pricing == "serverless":
            return f"ElastiCache Serverless ({engine}): ECPUs and GB-hours with its minimum, for {lifetime}"
        if self.pricing == "share":
            return f"{node} ({engine}): the job's own node-seconds of a cluster that outlives it"
        return f"{node} ({engine}) per node-hour for {lifetime}"

    def dollars(
        self,
        channel: str,
        table: Mapping[str, Mapping[str, float]],
        *,
        node: str,
        wall_s: float,
        requests: float,
        bytes_moved: float,
        stored_bytes: float = 0.0,
    ) -> float:
        """The cache's bill for its lifetime, from one region's prices (``table``)."""
        engine = self.engine_of(channel)
        if not self.priced(channel, table):
            raise ConfigError(f"no prices for a {engine} cache priced {self.pricing} in this region")
        engines = table.get("elasticache_engines", {})
        if self.pricing != "serverless":
            hours = self.lifetime_h(wall_s) if self.pricing == "node" else wall_s / 3600
            factor = engines["valkey_node_factor"] if engine == "valkey" else 1.0
            return hours * factor * _node_price(table["elasticache"], node)
        serverless = engines
        # About one ECPU per KB a simple GET or SET moves, and at least one a request.
        ecpus = max(requests, bytes_moved / KB)
        floor_gb = serverless[f"{engine}_min_gb"]
        # The minimum is billed for the cache's whole life; data above it while the job holds it.
        gb_hours = floor_gb * self.lifetime_h(wall_s) + max(stored_bytes / GB - floor_gb, 0.0) * wall_s / 3600
        return float(ecpus * serverless[f"{engine}_ecpu"] + gb_hours * serverless[f"{engine}_gb_hour"])


def _node_price(nodes: Mapping[str, float], node: str) -> float:
    """A Redis OSS or Memcached node's price per hour."""
    try:
        return float(nodes[node])
    except KeyError:
        raise ConfigError(f"no price for cache node {node!r}; known: {', '.join(sorted(nodes))}") from None
