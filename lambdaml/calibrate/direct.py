"""Probes of a direct channel: W processes summing vectors over loopback links, each round through
``DirectCommunicator`` as a job's workers run it, meeting through the rendezvous store.

The figures are the ones that make the model's link round (``analytic_model.links.link_round``)
equal the rounds measured: two ranks at one small vector (recursive doubling: one message) and
three large ones (reduce-scatter and all-gather: two messages of d/2) give a message's latency,
the links' rate and what a round loses waiting; more ranks at once give how much they crowd
this machine's cores. On loopback a link's bytes are this machine's CPU: its share of a step is 1.
"""

from __future__ import annotations

import secrets
import statistics
import time
from dataclasses import replace
from typing import Any

import numpy as np

from analytic_model.calibration import CallFigures, ChannelCalibration, ExchangeFigures, StoreFigures
from analytic_model.channel_perf import ChannelPerf
from analytic_model.links import link_round, plan
from lambdaml.calibrate.exchange import _solve_increasing
from lambdaml.calibrate.probing import PROBE_TIMEOUT_S, SMALL_FLOATS, Effort, cores, run_together, value
from lambdaml.channels import open_channel
from lambdaml.channels.kinds.direct import DirectSpec
from lambdaml.codec import encoded_bytes
from lambdaml.errors import LambdaMLError
from lambdaml.seal import OVERHEAD, new_secret

#: Float64 counts of the large vectors (256 KiB, 1 MiB, and the effort's large size, at least
#: 2 MiB): each over ``small_bytes``' default, so each goes by reduce-scatter and all-gather.
_LARGE_FLOATS = (2**15, 2**17)
_MAX_CROWDING = 5.0  # a crowding past this would be a broken measurement


def large_floats(effort: Effort) -> tuple[int, ...]:
    return (*_LARGE_FLOATS, max(2**18, effort.large_bytes // 8))


def _direct_rounds(
    spec: DirectSpec, job: str, secret: bytes, rank: int, world: int, floats: int, rounds: int, barrier: Any,
    results: Any,
) -> None:  # fmt: skip
    """One of ``world`` processes summing a vector of ``floats`` over links ``rounds`` times;
    reports the rounds' ends and its links' statistics."""
    from lambdaml.comm.direct.communicator import DirectCommunicator

    try:
        store = open_channel(spec)
        comm = DirectCommunicator(store, job, rank, world, spec=spec, secret=secret, timeout_s=PROBE_TIMEOUT_S)
        vector = value(floats, seed=rank)
        comm.allreduce(vector)  # links up, and the first round's buffers warm
        barrier.wait(PROBE_TIMEOUT_S)
        ends = [time.perf_counter()]
        for _ in range(rounds):
            comm.allreduce(vector)
            ends.append(time.perf_counter())
        stats = comm.link_stats()
        comm.finish()
        store.close()
        results.put((rank, (ends, stats), None))
    except Exception as exc:  # reported to the parent as one line
        results.put((rank, ([], {}), f"{type(exc).__name__}: {exc}"))


def direct_round_s(spec: DirectSpec, world: int, floats: int, rounds: int) -> float:
    """The mean round of ``world`` processes summing ``floats`` float64 over links (rank 0's clock);
    a probe whose links fell back to the store is refused: it would not time the links."""
    job, secret = f"calibrate-direct-{secrets.token_hex(3)}", new_secret()  # one secret: the links' challenge
    args = [(spec, job, secret, r, world, floats, rounds) for r in range(world)]
    reports = run_together(_direct_rounds, args, "calibrating direct links", PROBE_TIMEOUT_S + 10 * world)
    for rank, (_, stats) in reports:
        if stats.get("links_direct", 0) < world - 1 or stats.get("rounds_fallback", 0):
            raise LambdaMLError(f"calibrating direct links: rank {rank}'s links fell back to the store ({stats})")
    ends = next(report[0] for rank, report in reports if rank == 0)
    return float((ends[-1] - ends[0]) / (len(ends) - 1))


def _header() -> float:
    """What a message carries beyond its floats: the codec's header and the seal."""
    return float(encoded_bytes((1,), np.dtype(np.float64)) - 8 + OVERHEAD)


def direct_figures(spec: DirectSpec, effort: Effort, mac_Bps: float, add_Bps: float) -> ChannelCalibration:
    """A direct channel's figures on this machine (``mac_Bps``, ``add_Bps``: the compute probes')."""
    header, shared = _header(), float(cores())
    rounds = max(20, effort.repeats * 4)
    small_s = statistics.median(direct_round_s(spec, 2, SMALL_FLOATS, rounds) for _ in range(3))
    large = large_floats(effort)
    large_s = [direct_round_s(spec, 2, n, max(5, effort.repeats)) for n in large]
    base = ChannelPerf(
        "direct", latency_put_s=0.0, latency_get_s=0.0, extra_put_s=0.0, extra_get_s=0.0,
        bandwidth_put_Bps=1.0, bandwidth_get_Bps=1.0, server_put_s=0.0, server_get_s=0.0,
        cpu_share_put=1.0, cpu_share_get=1.0, shared_cores=shared,
        mac_Bps=mac_Bps if spec.links_carry_mac else None,  # frames are hashed only under integrity: mac
        small_bytes=float(spec.small_bytes),
    )  # fmt: skip

    def rest(world: int, floats: int) -> float:
        """The model's round without the links' latency and bytes: hashing and summing."""
        steps = plan(world, floats * 8.0, header, spec.small_bytes)
        return base.mac_s(2 * steps.sent, world) + steps.summed_bytes / add_Bps

    # Two ranks: a small round is one message's latency and bytes, a large one two messages of d/2.
    link_bytes = [plan(2, n * 8.0, header, spec.small_bytes).sent for n in large]
    left = [t - rest(2, n) for t, n in zip(large_s, large, strict=True)]
    fit = statistics.linear_regression(link_bytes, left)
    bandwidth = 1.0 / max(fit.slope, 1e-12)
    small_bytes = plan(2, SMALL_FLOATS * 8.0, header, spec.small_bytes).sent
    small_left = small_s - rest(2, SMALL_FLOATS) - small_bytes / bandwidth  # one latency and the wait
    # The ring's two messages less the small round's one: a message's latency, the rest of the
    # small round its wait. Where noise leaves no difference, the small round is all latency.
    separated = fit.intercept - small_left
    latency = max(small_left, 0.0) if separated <= 0 else min(separated, max(small_left, 0.0))
    wait = max(small_left - latency, 0.0)
    perf = replace(
        base, latency_put_s=latency, latency_get_s=latency, bandwidth_put_Bps=bandwidth,
        bandwidth_get_Bps=bandwidth, wait_s=wait,
    )  # fmt: skip
    crowding = per_worker = 0.0
    if effort.processes > 2:  # more ranks than two: how much they crowd each other, and straggle
        world, biggest = effort.processes, large[-1]
        measured = direct_round_s(spec, world, biggest, max(5, effort.repeats))

        def crowded(c: float) -> float:
            return link_round(replace(perf, crowding=c), world, biggest * 8.0, add_Bps, header).seconds

        crowding = _solve_increasing(crowded, measured, _MAX_CROWDING)
        perf = replace(perf, crowding=crowding)
        small_world = direct_round_s(spec, world, SMALL_FLOATS, rounds)
        unwaited = link_round(perf, world, SMALL_FLOATS * 8.0, add_Bps, header).seconds
        per_worker = max(small_world - unwaited, 0.0) / (world - 2)
    calls = CallFigures(latency, latency, 0.0, 0.0, bandwidth, bandwidth, 1.0, 1.0)
    exchange = ExchangeFigures(
        crowding=crowding, step_wake_s=0.0, wait_s=wait, wait_per_worker_s=per_worker, sr_wait_s=wait,
        sr_wait_per_worker_s=per_worker, bytes_slowdown=1.0, sr_bytes_slowdown=1.0,
    )  # fmt: skip
    return ChannelCalibration(calls, StoreFigures(0.0, 0.0, None, None), exchange, 0.0, 0.0, None)
