"""The shipped data files: prices (``prices.json``) and AWS performance defaults (``aws_defaults.json``).

Both are read once through ``importlib.resources``, so they work from a wheel as well as
from a checkout. ``lambdaml.cost`` prices finished jobs from the same table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, TypedDict

from analytic_model.cache_billing import CacheBilling
from lambdaml.catalogue import ChannelInfo
from lambdaml.errors import ConfigError

#: One region's prices: each section (``lambda``, ``s3``, ``s3express``, ``dynamodb``, ``elasticache``,
#: ``ec2``, and from the table's ``elasticache_engines`` its ``elasticache_engines``) names its prices
#: in dollars; a channel's description names its section.
RegionPrices = Mapping[str, Mapping[str, float]]


class PriceTable(TypedDict):
    """``prices.json``: the regions' prices, with where they came from and when they were checked."""

    _source: str
    _checked: str
    _s3express: str
    _dynamodb: str
    _elasticache_serverless: str
    _elasticache_valkey: str
    _rendezvous: str
    _units: str
    elasticache_engines: Mapping[str, Mapping[str, float]]  # by region: Valkey's and Serverless's prices
    rendezvous: Mapping[str, Mapping[str, float]]  # by region: a direct channel's rendezvous instance, per hour
    regions: Mapping[str, RegionPrices]


@cache
def _shipped(name: str) -> Any:
    """A data file as ``json.loads`` reads it; its reader says what shape it has."""
    return json.loads(resources.files("analytic_model").joinpath(name).read_text())


def price_table() -> PriceTable:
    """The whole price table, with its ``_source`` and ``_checked`` date."""
    table: PriceTable = _shipped("prices.json")
    return table


def prices(region: str) -> RegionPrices:
    """One region's prices: ``lambda``, ``s3``, ``dynamodb``, ``elasticache`` and ``ec2``, and its
    ``elasticache_engines`` (Valkey's and ElastiCache Serverless's) and ``rendezvous`` (a direct
    channel's rendezvous instance) where the table has them."""
    table = price_table()
    try:
        region_prices = table["regions"][region]
    except KeyError:
        known = ", ".join(sorted(table["regions"]))
        raise ConfigError(f"no prices for region {region!r}; known: {known}") from None
    extra = {
        section: found
        for section in ("elasticache_engines", "rendezvous")
        if (found := table.get(section, {}).get(region)) is not None  # type: ignore[attr-defined]
    }
    return {**region_prices, **extra} if extra else region_prices


ARCHITECTURES = ("x86_64", "arm64")


def gb_second_price(table: Mapping[str, float], architecture: str) -> float:
    """One region's Lambda price of a GB-second on ``architecture`` (x86_64, or arm64: Graviton)."""
    if architecture not in ARCHITECTURES:
        raise ConfigError(f"unknown Lambda architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")
    return float(table["gb_second_arm" if architecture == "arm64" else "gb_second_x86"])


def aws_defaults() -> Mapping[str, object]:
    """The AWS performance defaults as shipped: every figure as ``{"value", "source"}`` (JSON that
    ``Profile.from_json`` parses)."""
    defaults: Mapping[str, object] = _shipped("aws_defaults.json")
    return defaults


def is_figure(node: object) -> bool:
    """A ``{"value": ..., "source": ...}`` leaf of the defaults file."""
    return isinstance(node, dict) and set(node) == {"value", "source"}


def plain(node: Any) -> Any:
    """The defaults with every figure replaced by its value and ``_``-prefixed notes dropped."""
    if is_figure(node):
        return node["value"]
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items() if not k.startswith("_")}
    return node


def sources(node: Any, path: str = "") -> dict[str, str]:
    """Dotted path of every figure -> where it came from (a table's ``_source`` covers its rows)."""
    found: dict[str, str] = {}
    if is_figure(node):
        found[path] = str(node["source"])
    elif isinstance(node, dict):
        if "_source" in node and path:
            found[path] = str(node["_source"])
        for key, value in node.items():
            if not key.startswith("_"):
                found.update(sources(value, f"{path}.{key}" if path else key))
    return found


def channel_dollars(
    channel: ChannelInfo,
    table: RegionPrices,
    *,
    wall_s: float,
    node: str,
    puts: float,
    gets: float,
    lists: float = 0.0,
    deletes: float = 0.0,
    bytes_sent: float = 0.0,
    bytes_received: float = 0.0,
    cache: CacheBilling | None = None,
    stored_bytes: float = 0.0,
) -> float:
    """A channel's price for a job of ``wall_s``, as its description bills it: its requests, its
    cache, or nothing. ``table`` is one region's prices; the same rule prices finished jobs
    (``lambdaml.cost``) and predictions (``analytic_model.prediction``).

    A cache is billed as ``cache`` says (``CacheBilling``: node-hours for the cache's lifetime, or
    Serverless, ``stored_bytes`` the most data it holds); without one, the job's share of the
    ``node``'s hours: ``wall_s`` of them, what a job adds to a cluster that outlives it.
    """
    if channel.billed_by == "node_hours" and cache is not None:
        return cache.dollars(
            channel.name,
            table,
            node=node,
            wall_s=wall_s,
            requests=puts + gets + lists + deletes,
            bytes_moved=bytes_sent + bytes_received,
            stored_bytes=stored_bytes,
        )
    if channel.billed_by == "node_hours":
        nodes = table[str(channel.prices)]
        try:
            hourly = float(nodes[node])
        except KeyError:
            raise ConfigError(f"no price for cache node {node!r}; known: {', '.join(sorted(nodes))}") from None
        return wall_s / 3600 * hourly
    if channel.billed_by == "requests":
        return request_dollars(
            str(channel.prices),
            table,
            puts=puts,
            gets=gets,
            lists=lists,
            deletes=deletes,
            bytes_sent=bytes_sent,
            bytes_received=bytes_received,
        )
    return 0.0


def request_dollars(
    prices: str,
    table: RegionPrices,
    *,
    puts: float,
    gets: float,
    lists: float = 0.0,
    deletes: float = 0.0,
    bytes_sent: float = 0.0,
    bytes_received: float = 0.0,
) -> float:
    """What a channel's requests cost by the rule of the price-table section ``prices`` (S3's,
    S3 Express One Zone's or DynamoDB's: AWS's own services, priced as AWS prices them; another: 0).

    ``table`` is one region's prices.
    """
    if prices == "s3":
        s3 = table["s3"]
        return float((puts + lists + deletes) * s3["put_like_request"] + gets * s3["get_like_request"])
    if prices == "s3express":
        express = table["s3express"]
        requests = (puts + lists + deletes) * express["put_like_request"] + gets * express["get_like_request"]
        upload = _gb_over_free_part(bytes_sent, puts) * express["upload_gb_over_512kb"]
        retrieval = _gb_over_free_part(bytes_received, gets) * express["retrieval_gb_over_512kb"]
        return float(requests + upload + retrieval)
    if prices == "dynamodb":
        # One write unit per KB written, one consistent read unit per 4 KB read, at least one per request.
        writes = max(bytes_sent / 1024, puts)
        reads = max(bytes_received / (4 * 1024), gets)
        unit = table["dynamodb"]
        return float(writes * unit["write_request_unit"] + reads * unit["read_request_unit"])
    return 0.0


#: S3 Express One Zone charges per GB only for the part of each request above this size.
S3EXPRESS_FREE_BYTES = 512 * 1024
GB = 2**30


def _gb_over_free_part(total_bytes: float, requests: float) -> float:
    """GB above the free 512 KB of each request, as if every request carried the mean size (a pattern's
    values in one round are all the same size, except the 2-D pattern's two kinds: there a lower bound)."""
    if requests <= 0:
        return 0.0
    return requests * max(total_bytes / requests - S3EXPRESS_FREE_BYTES, 0.0) / GB
