"""Lambda's network bandwidth, a function of a function's memory and of whether it sits in a VPC.

Larger functions outside a VPC get more bandwidth (``faas.network_scaled_*``); a function
attached to a VPC, as one that reaches an ElastiCache cluster is, keeps ``faas.network_Bps``
unless the profile says otherwise. A channel's own transfer rates on AWS are Lambda's network,
so they scale by the same factor.
"""

from __future__ import annotations

from dataclasses import replace

from analytic_model.channel_perf import ChannelPerf
from analytic_model.kinds import described
from analytic_model.profile import Profile


def in_vpc(channel: str) -> bool:
    """Whether workers on ``channel`` are attached to a VPC: a stack's cache is reachable only there."""
    return described(channel).stack_cache


def lambda_network_Bps(profile: Profile, memory_mb: float, *, vpc: bool) -> float:
    """Bytes a second one function of ``memory_mb`` moves: ``faas.network_Bps``, or, outside a VPC
    (or where the profile scales it there too) and from ``network_scaled_from_mb`` up, linear in
    memory from ``network_scaled_from_Bps`` to ``network_scaled_max_Bps`` at the largest memory."""
    faas = profile.faas
    base = faas.network_Bps
    if profile.target != "aws":  # a local target's network is its loopback, whatever a worker's memory
        return base
    low, at_low, at_high = faas.network_scaled_from_mb, faas.network_scaled_from_Bps, faas.network_scaled_max_Bps
    if low is None or at_low is None or at_high is None or (vpc and not faas.network_scaled_in_vpc):
        return base
    if memory_mb < low:
        return base
    high = profile.lambda_.max_memory_mb
    share = 1.0 if high <= low else min(1.0, (memory_mb - low) / (high - low))
    return max(base, at_low + share * (at_high - at_low))


def scaled_channel(perf: ChannelPerf, factor: float) -> ChannelPerf:
    """``perf`` with its worker-side transfer rates ``factor`` times as fast (the store's limits stay)."""
    if factor == 1.0:
        return perf
    big_put, big_get = perf.bandwidth_put_big_Bps, perf.bandwidth_get_big_Bps
    return replace(
        perf,
        bandwidth_put_Bps=perf.bandwidth_put_Bps * factor,
        bandwidth_get_Bps=perf.bandwidth_get_Bps * factor,
        bandwidth_put_big_Bps=None if big_put is None else big_put * factor,
        bandwidth_get_big_Bps=None if big_get is None else big_get * factor,
    )
