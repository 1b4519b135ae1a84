"""One round of a direct channel: workers exchange messages over TCP links, no store in between.

``lambdaml.comm.direct`` sums a vector of d bytes one of two ways, by its size (``small_bytes``):

- at most ``small_bytes``, recursive doubling (Bruck's all-gather of whole vectors, then each
  rank folds the W vectors in rank order): ceil(log2 W) steps, (W-1) d bytes sent per rank;
- larger, pairwise reduce-scatter then all-gather (rank-ordered sums): 2(W-1) steps of one
  message of d/W, 2(W-1)/W d bytes sent per rank.

A step sends one message and receives one at the same time: it costs a message's latency and
its bytes at the link's rate (``ChannelPerf``'s put figures: a link's), each message hashed where
the job's frames carry a MAC (``integrity: mac``; by default a link admits only peers that proved
the job's secret, and frames are bound to their key, not hashed). A link round issues no store requests; its
bytes are counted as ``bytes_sent`` and ``bytes_received`` over all workers. The rendezvous
service and the store endpoints are published on are priced per job (``rendezvous_dollars``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from analytic_model.cache_billing import CacheBilling
from analytic_model.channel_perf import ChannelPerf
from analytic_model.collectives import Requests, RoundCost
from analytic_model.kinds import described
from analytic_model.profile import Profile, RendezvousFigures
from analytic_model.tables import request_dollars
from lambdaml.errors import ConfigError

DIRECT = "direct"
#: ``DirectSpec.small_bytes``' default, for a profile that does not say.
SMALL_BYTES = 64 * 1024
DOUBLING, RING = "doubling", "ring"


def over_links(kind: str) -> bool:
    """Whether a channel's rounds run over links between the workers (no store in between)."""
    return kind == DIRECT


def algorithm(vector_bytes: float, small_bytes: float | None) -> str:
    """The communicator's choice for a vector: recursive doubling up to ``small_bytes``, else the ring."""
    return DOUBLING if vector_bytes <= (SMALL_BYTES if small_bytes is None else small_bytes) else RING


@dataclass(frozen=True)
class LinkPlan:
    """What one rank does in a round: its steps, the bytes of each step's message, and the bytes it sums."""

    algorithm: str
    step_bytes: tuple[float, ...]  # one message sent (and one received) a step
    summed_bytes: float  # bytes of vectors or chunks added to the rank's own

    @property
    def sent(self) -> float:
        """Bytes one rank sends (and receives) a round: the busiest process's link bytes, each way."""
        return sum(self.step_bytes)


def plan(workers: int, vector_bytes: float, header: float, small_bytes: float | None) -> LinkPlan:
    """One rank's steps for a vector of ``vector_bytes`` (each message carries ``header`` more)."""
    w = workers
    if w <= 1:
        return LinkPlan(algorithm(vector_bytes, small_bytes), (), 0.0)
    if algorithm(vector_bytes, small_bytes) == DOUBLING:
        # Bruck: at step k a rank passes on the 2^k vectors it holds (the last step the rest).
        steps, held = [], 1
        while held < w:
            count = min(held, w - held)
            steps.append(count * (vector_bytes + header))
            held += count
        return LinkPlan(DOUBLING, tuple(steps), (w - 1) * vector_bytes)
    chunk = vector_bytes / w
    return LinkPlan(RING, (chunk + header,) * (2 * (w - 1)), (w - 1) * chunk)


def link_round(channel: ChannelPerf, workers: int, vector_bytes: float, add_Bps: float, header: float) -> RoundCost:
    """One BSP round's sum over direct links (compute excluded)."""
    w = workers
    if w <= 1:
        return RoundCost(0.0, Requests())
    steps = plan(w, vector_bytes, header, channel.small_bytes)
    crowd = channel.crowd_factor(w)

    def step_s(nbytes: float) -> float:
        # Sending and receiving overlap: one message's latency and bytes; on shared cores the
        # CPU part waits for a core, and every message is sealed and its peer's opened.
        transfer = (channel.latency("put") + channel.bytes_s("put", nbytes) * crowd) * channel.cpu_stretch("put", w)
        return transfer + channel.mac_s(2 * nbytes, w)

    links_s = sum(step_s(nbytes) for nbytes in steps.step_bytes)
    reduce_s = steps.summed_bytes / add_Bps
    late = channel.straggle(w)
    chain = links_s + reduce_s + late
    moved = w * steps.sent
    phases = {
        "links": links_s,
        "reduce": reduce_s,
        "late": late,
        "chain": chain,
        "store_busy": 0.0,
    }
    return RoundCost(chain, Requests(bytes_sent=moved, bytes_received=moved), phases)


def link_rate(perf: ChannelPerf, network_Bps: float) -> ChannelPerf:
    """A link's figures where the function's own network (``network.lambda_network_Bps``, outside a
    VPC) is faster than the link's published rate: the faster of the two."""
    if network_Bps <= perf.bandwidth_put_Bps and network_Bps <= perf.bandwidth_get_Bps:
        return perf
    return replace(
        perf,
        bandwidth_put_Bps=max(perf.bandwidth_put_Bps, network_Bps),
        bandwidth_get_Bps=max(perf.bandwidth_get_Bps, network_Bps),
    )


def rendezvous_of(profile: Profile) -> RendezvousFigures:
    """The profile's rendezvous figures; one line where it has none."""
    if profile.rendezvous is None:
        raise ConfigError(f"profile {profile.target!r} has no rendezvous figures to price a direct channel by")
    return profile.rendezvous


def rendezvous_hours(cache: CacheBilling, wall_s: float) -> float:
    """The hours the rendezvous instance runs: as a node-billed cache's (``--cache-hours``, or the
    job's time rounded up to the hour), or the job's own seconds where caches are priced as a share."""
    return wall_s / 3600 if cache.pricing == "share" else cache.lifetime_h(wall_s)


def rendezvous_dollars(
    figures: RendezvousFigures,
    table: Mapping[str, Mapping[str, float]],
    *,
    workers: int,
    wall_s: float,
    cache: CacheBilling,
) -> float:
    """The rendezvous service's instance for its lifetime, and the store's requests publishing and
    reading the workers' endpoints (W puts and W gets a job; a fallback's exchanges are left out)."""
    try:
        hourly = float(table["rendezvous"][figures.instance])
    except KeyError:
        raise ConfigError(f"no price for a rendezvous instance {figures.instance!r} in this region") from None
    store = described(figures.store)
    if store.billed_by != "requests":
        raise ConfigError(f"a direct channel's functions publish endpoints on S3 or DynamoDB, not {figures.store!r}")
    publish = request_dollars(str(store.prices), table, puts=workers, gets=workers)
    return rendezvous_hours(cache, wall_s) * hourly + publish


def describe_rendezvous(figures: RendezvousFigures, cache: CacheBilling, wall_s: float) -> str:
    """What the advice says the rendezvous service is priced as, e.g. ``one t4g.nano for 1 h (...)``."""
    if cache.pricing == "share":
        return f"one {figures.instance}: the job's own seconds of one that outlives it"
    hours = f"{rendezvous_hours(cache, wall_s):g} h"
    lifetime = "(the job's time rounded up to the hour)" if cache.hours is None else "(stated)"
    return f"one {figures.instance} per instance-hour for {hours} {lifetime}"
