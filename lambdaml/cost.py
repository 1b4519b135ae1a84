"""What a job cost: Lambda GB-seconds and requests, channel requests, its cache.

Prices come from the price table shipped with the analytic model
(``analytic_model/prices.json``, with its source and date). The usage figures are exact
counts from the run; the dollars are only as current as that table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from analytic_model.cache_billing import CacheBilling
from analytic_model.tables import channel_dollars, gb_second_price, price_table, prices
from lambdaml import catalogue
from lambdaml.errors import ConfigError

KB = 1024


class LambdaCost(TypedDict):
    """A run's Lambda bill: its invocations, billed GB-seconds and requests, in dollars."""

    invocations: int
    cold_starts: int
    gb_seconds: float
    architectures: list[str]
    dollars: float


class ChannelCost(TypedDict):
    """What a channel's use cost: its requests, priced by its description."""

    requests: float
    dollars: float


class PricedChannel(ChannelCost):
    kind: str


class Ec2Cost(TypedDict):
    """On-demand instances for a run's wall time."""

    instance_type: str
    instances: int
    seconds_billed: int
    dollars_per_hour: float
    dollars: float


#: The cost section of a result: Lambda and its channel, or EC2 (``lambda`` is a keyword: the
#: functional form). Every key may be missing from a result an older version wrote.
JobCost = TypedDict(
    "JobCost",
    {
        "region": str,
        "prices_checked": str | None,
        "lambda": LambdaCost,
        "channel": PricedChannel,
        "ec2": Ec2Cost,
        "total_dollars": float,
    },
    total=False,
)


@dataclass(frozen=True)
class Invocation:
    """One billed Lambda invocation: how long it ran, its memory size, whether it was a cold start."""

    duration_s: float
    memory_mb: int
    cold: bool = False  # results from before cold starts were counted do not say
    architecture: str = "x86_64"  # arm64 (Graviton) bills less per GB-second


def lambda_cost(invocations: Sequence[Invocation], region: str) -> LambdaCost:
    """Billed GB-seconds (duration rounded up to 1 ms, times memory) and requests, in dollars."""
    table = prices(region)["lambda"]
    gb_s = dollars = 0.0
    for i in invocations:
        billed = math.ceil(i.duration_s * 1000) / 1000 * i.memory_mb / KB
        gb_s += billed
        dollars += billed * gb_second_price(table, i.architecture)
    dollars += len(invocations) * table["request"]
    cold = sum(1 for i in invocations if i.cold)
    return {
        "invocations": len(invocations),
        "cold_starts": cold,
        "gb_seconds": gb_s,
        "architectures": sorted({i.architecture for i in invocations}),
        "dollars": dollars,
    }


def lambda_seconds_cost(seconds: float, workers: int, memory_mb: int, region: str) -> float:
    """``workers`` x86_64 Lambda workers of ``memory_mb`` running ``seconds`` each, at the GB-second price."""
    price = gb_second_price(prices(region)["lambda"], "x86_64")
    return float(seconds * workers * memory_mb / KB * price)


#: The node a finished job's cache channel is priced at (the template's default ElastiCache node).
CACHE_NODE = "cache.t4g.small"
#: The instance a finished direct job's rendezvous service is priced at (the template's).
RENDEZVOUS_INSTANCE = "t4g.nano"


def channel_cost(
    kind: str,
    traffic: Mapping[str, float],
    wall_s: float,
    region: str,
    cache: CacheBilling | None = None,
    node: str = CACHE_NODE,
    store: str | None = None,
) -> ChannelCost:
    """The channel's use in dollars, as its description bills it: its requests, or its cache.

    A cache is billed as ``cache`` says (the cache's lifetime in node-hours, or Serverless, whose
    data stored is taken at its minimum: a run does not count it); without one, the job's share
    of ``node``'s hours: its own time, what it adds to a cluster that outlives it. ``store``: the
    kind of the store a direct channel meets through, which its requests are billed as; its
    rendezvous service is priced as a cache is, the job's share of ``RENDEZVOUS_INSTANCE``'s hours.
    """
    table = prices(region)
    dollars = channel_dollars(
        catalogue.channel(store or kind),
        table,
        wall_s=wall_s,
        node=node,
        cache=cache,
        puts=traffic.get("puts", 0),
        gets=traffic.get("gets", 0),
        lists=traffic.get("lists", 0),
        deletes=traffic.get("deletes", 0),
        bytes_sent=traffic.get("bytes_sent", 0),
        bytes_received=traffic.get("bytes_received", 0),
    )
    if store is not None and store != kind:
        dollars += wall_s / 3600 * float(table["rendezvous"][RENDEZVOUS_INSTANCE])
    return {"requests": traffic.get("requests", 0), "dollars": dollars}


def job_cost(
    kind: str,
    traffic: Mapping[str, float],
    invocations: Sequence[Invocation],
    wall_s: float,
    region: str,
    cache: CacheBilling | None = None,
    store: str | None = None,
) -> JobCost:
    """The cost section of a result: the workers' channel traffic and Lambda invocations, priced
    (a cache, and a direct channel's ``store``, as ``channel_cost`` prices them)."""
    lam = lambda_cost(invocations, region)
    channel = channel_cost(kind, traffic, wall_s, region, cache, store=store)
    return {
        "region": region,
        "prices_checked": price_table().get("_checked"),
        "lambda": lam,
        "channel": {"kind": kind, **channel},
        "total_dollars": lam["dollars"] + channel["dollars"],
    }


EC2_MINIMUM_BILLED_S = 60  # per-second billing, with a one-minute minimum per instance


def ec2_cost(instance_type: str, instances: int, wall_s: float, region: str) -> JobCost:
    """The cost section of an IaaS run: ``instances`` on-demand instances for the run's wall time."""
    table = prices(region)["ec2"]
    if instance_type not in table:
        known = ", ".join(sorted(table))
        raise ConfigError(f"no EC2 price for {instance_type!r} in {region}; known: {known}")
    seconds = max(EC2_MINIMUM_BILLED_S, math.ceil(wall_s))
    dollars = instances * seconds * table[instance_type] / 3600
    return {
        "region": region,
        "prices_checked": price_table().get("_checked"),
        "ec2": {
            "instance_type": instance_type,
            "instances": instances,
            "seconds_billed": seconds,
            "dollars_per_hour": table[instance_type],
            "dollars": dollars,
        },
        "total_dollars": dollars,
    }
