"""Workers exchanging values through the real patterns: what a wait loses, how much workers
moving bytes at once crowd each other, how much slower a pattern's bytes move in real rounds.

Each figure is the one that makes the model's round (``analytic_model.collectives``) equal
the round measured with W spawned processes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import secrets
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analytic_model.calibration import ExchangeFigures
from analytic_model.channel_perf import ChannelPerf
from analytic_model.collectives import CALIBRATED_PATTERNS, collective
from analytic_model.exchanges import ring_exchange
from analytic_model.profile import aws_profile
from analytic_model.transfers import Polling, store_s
from lambdaml import codec, keys
from lambdaml.calibrate.probing import (
    PROBE_TIMEOUT_S,
    SMALL_FLOATS,
    Effort,
    cores,
    median_time,
    run_together,
    value,
)
from lambdaml.channels import open_channel
from lambdaml.config import ChannelSpec
from lambdaml.runtime.heap import keep_freed_buffers
from lambdaml.seal import OVERHEAD, new_secret

log = logging.getLogger(__name__)

_MAX_SLOWDOWN = 5.0  # bytes slower than this in real rounds would be a broken measurement
# The store's byte rate comes from probes of one value size at a time, which moto's rounds of
# megabyte values fell up to 5x short of: a wider bound, still a sanity bound.
_MAX_STORE_SLOWDOWN = 10.0
_MAX_PROBE_ROUNDS = 2000
RING = "ring"  # the probes' name for the ring methods' neighbour exchange (``lambdaml.comm.ring``)


def _probe_step(floats: int) -> Callable[[], None]:
    """The compute a worker does between two collectives in the exchange probes: a small
    gradient step (logistic regression, 100 rows of 28 features) and, for a large value, what
    a step does to a model of its size (a fresh gradient, the regularizer, the update), so
    the collective's transfers run on the caches such a step leaves them."""
    rng = np.random.default_rng(0)
    X, y, w = rng.standard_normal((1000, 28)), (rng.random(1000) > 0.5).astype(np.float64), np.zeros(28)
    params = np.zeros(floats if floats > SMALL_FLOATS else 0)

    def step() -> None:
        rows = rng.integers(0, len(y), 100)
        batch = X[rows]
        w[:] -= 1e-3 * (batch.T @ (1.0 / (1.0 + np.exp(-(batch @ w))) - y[rows])) / len(rows)
        if params.size:
            grad = np.zeros_like(params)
            grad[rows] = w[0]
            params[:] -= 1e-3 * (grad / len(rows) + 1e-4 * params)

    return step


def _rounds(
    spec: ChannelSpec,
    job: str,
    secret: bytes | None,
    rank: int,
    world: int,
    floats: int,
    rounds: int,
    pattern: str | None,
    barrier: Any,
    results: Any,
) -> None:
    """One of ``world`` processes doing rounds: a small gradient step and the real collective of
    ``pattern``, or (None) putting one value and reading everyone else's (what every phase of
    the patterns amounts to). Reports the rounds' ends and, with a pattern, how much longer the
    step took between collectives than back to back."""
    from lambdaml.comm.channel import ChannelCommunicator
    from lambdaml.comm.ring import RingExchange

    try:
        keep_freed_buffers()  # as a worker's process does: rounds of large values churn no pages
        channel = open_channel(spec)
        collective = "allreduce" if pattern in (None, RING) else pattern
        comm = ChannelCommunicator(
            channel, job, rank, world, pattern=collective, timeout_s=PROBE_TIMEOUT_S, secret=secret
        )
        ring = RingExchange(comm) if pattern == RING else None
        vector = value(floats, seed=rank)
        step = _probe_step(floats)
        alone = median_time(step, 30) if pattern else 0.0
        ends, steps = [], []
        barrier.wait(PROBE_TIMEOUT_S)
        for round_ in range(rounds):
            if pattern:
                started = time.perf_counter()
                step()
                steps.append(time.perf_counter() - started)
                if ring is not None:
                    ring.exchange({"x": vector})
                else:
                    comm.allreduce(vector)
            else:
                data = codec.encode(vector)
                channel.put(keys.comm_key(job, round_, "x", rank=rank), data)
                others = [keys.comm_key(job, round_, "x", rank=r) for r in range(world) if r != rank]
                # Every rank's value is as long as mine: read as the patterns read theirs.
                for raw in channel.wait_for(others, PROBE_TIMEOUT_S, lengths=dict.fromkeys(others, len(data))).values():
                    codec.decode(raw, dtype=vector.dtype, shape=vector.shape)
            ends.append(time.perf_counter())
        comm.finish()  # rank 0 waits for everyone, then clears the probe's keys
        channel.close()
        in_run = statistics.fmean(steps[2:]) if pattern else 0.0
        results.put((rank, (ends, in_run, alone), None))
    except Exception as exc:  # reported to the parent as one line
        results.put((rank, ([], 0.0, 0.0), f"{type(exc).__name__}: {exc}"))


@dataclass(frozen=True)
class ProbeRounds:
    round_s: float  # rank 0's mean round, after a warm-up
    step_s: float  # the mean gradient step between collectives, over the ranks
    step_alone_s: float  # the same step back to back in one process


def _mean_round(spec: ChannelSpec, world: int, floats: int, rounds: int, *, pattern: str | None) -> ProbeRounds:
    """The mean round of ``world`` processes doing ``_rounds``, and their gradient steps."""
    job = f"calibrate-rounds-{secrets.token_hex(3)}"
    # The values are sealed as a job's would be: authenticated where the job's channel would be.
    shared = (spec, job, new_secret() if spec.authenticates_values else None)
    args = [(*shared, r, world, floats, rounds, pattern) for r in range(world)]
    reports = run_together(_rounds, args, f"calibrating rounds on {spec.kind}", PROBE_TIMEOUT_S)
    ends = next(report[0] for rank, report in reports if rank == 0)[2:]
    # The mean, not the median: a job's time is the sum of its rounds, slow ones included
    # (a round's time is skewed: now and then a worker waits for a core).
    return ProbeRounds(
        (ends[-1] - ends[0]) / (len(ends) - 1),
        statistics.fmean(report[1] for _, report in reports),
        statistics.fmean(report[2] for _, report in reports),
    )


def _solve_increasing(f: Callable[[float], float], target: float, high: float) -> float:
    """The x in [0, high] where a non-decreasing f reaches ``target`` (bisection).

    f may jump (a poll that misses adds whole requests): where it jumps over the target,
    the side of the jump nearer the target wins.
    """
    if f(0.0) >= target:
        return 0.0
    if f(high) < target:
        return high
    low = 0.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (low, mid) if f(mid) >= target else (mid, high)
    return low if target - f(low) < f(high) - target else high


def crowded_bytes(perf: ChannelPerf, world: int, extra: int, measured_s: float) -> float | None:
    """How much slower ``world`` workers that each put ``extra`` bytes and get everyone else's move
    them than one worker alone (``measured_s``: what the bytes added to their round); None where
    the store, not the workers, sets that time.

    One worker's time is its calls' bytes with their CPU waiting for a core, as the model has it.
    The MAC an authenticated channel's workers compute over the bytes is the model's apart
    (``ChannelPerf.mac_s``): counted as crowding too, it put Redis's at 1.5 a worker where
    without it the same probes said 0.58, and the model then had ScatterReduce at W = 2,
    d = 1e6 slower than AllReduce, which it beat 1.37x.
    """
    put_s, get_s = (extra / perf.bandwidth(op) * perf.cpu_stretch(op, world) for op in ("put", "get"))
    alone = put_s + (world - 1) * get_s
    hashing = perf.mac_s(world * extra, world)  # each worker's one put and world - 1 gets
    store = store_s(perf, "put", 0, world * extra, world) + store_s(perf, "get", 0, world * (world - 1) * extra, world)
    log.debug(
        "%s W=%d, every worker's value to everyone: %.2f ms a round more than small values, %.2f ms alone, "
        "%.2f ms of it hashing",
        perf.kind, world, measured_s * 1e3, alone * 1e3, hashing * 1e3,
    )  # fmt: skip
    if alone < store:  # the store moves the bytes: what they take is the store's slowdown
        return None
    return (measured_s - hashing) / alone


def measure_exchange(spec: ChannelSpec, perf: ChannelPerf, effort: Effort, large_floats: int) -> ExchangeFigures:
    """What W workers that exchange values lose beyond one worker's transfers (``perf``: the
    channel as measured so far), measured with W processes.

    With small values, W processes run the real AllReduce, then the real ScatterReduce, then
    the ring methods' neighbour exchange, round after round: each one's wait loss (polling,
    stragglers and, on a shared machine, scheduling; on a store that serves one request at a
    time, how the workers' requests interleave) is the figure that makes the model's round
    equal the measured one, at 2 and at ``effort.processes`` workers. With
    large values, each process puts one value and reads the others' (what every phase of
    the patterns amounts to): what the bytes cost beyond one worker's transfers is crowding,
    workers that move bytes at once slowing each other down. Last, where the workers' bytes
    (not the store) set a pattern's rounds, W processes run it on large values: what its
    bytes take beyond all of that is its slowdown; where the store sets them, what the store's
    bytes take in them beyond its probes' rate is the store's.

    Every probe process keeps its freed buffers as a worker does (``keep_freed_buffers``):
    a near-empty process that gave its heap back each round would fault its pages in again
    and measure rounds twice as long as a job's.
    """
    polling = Polling.of(aws_profile(), spec.kind)  # the poll schedule is code, not measured
    message = len(codec.encode_bundle({"x": value(SMALL_FLOATS)})) + OVERHEAD  # a ring message, sealed
    header = len(codec.encode(value(0)))
    small, large = (len(codec.encode(value(n))) for n in (SMALL_FLOATS, large_floats))
    rounds = max(20, 4 * effort.repeats)  # spawning the processes costs more than the rounds
    worlds = sorted({2, max(2, effort.processes)})
    losses: dict[tuple[str, int], float] = {}
    wakes: list[float] = []  # what a step between collectives takes beyond the same step's share of a core
    slowdowns: dict[int, float] = {}  # per world: the crowded bytes' time over one worker's
    for world in worlds:
        for pattern in (*CALIBRATED_PATTERNS, RING):

            def modelled(loss: float, world: int = world, pattern: str = pattern) -> float:
                with_loss = _replaced(perf, _pattern_fields(pattern, wait_s=loss, wait_per_worker_s=0.0))
                if pattern == RING:  # each rank puts its message and waits for its neighbours'
                    return ring_exchange(with_loss, world, message, polling).seconds
                return collective(with_loss, pattern, world, small - header, math.inf, polling, header).seconds

            # Rounds of a millisecond are at the scheduler's mercy: enough of them to last ``rounds_s``.
            enough = min(_MAX_PROBE_ROUNDS, max(rounds, math.ceil(effort.rounds_s / max(modelled(0.0), 1e-4))))
            probe = _mean_round(spec, world, SMALL_FLOATS, enough, pattern=pattern)
            if pattern != RING:  # the step's wake-up is the collectives' figure
                wakes.append(max(probe.step_s - probe.step_alone_s / min(1.0, cores() / world), 0.0))
            measured = probe.round_s - probe.step_s
            losses[pattern, world] = _solve_increasing(modelled, measured, high=max(measured, 1e-6))
            log.debug(
                "%s %s W=%d, small values: round %.2f ms, modelled %.2f ms without waiting: wait loss %.2f ms",
                spec.kind, pattern, world, measured * 1e3, modelled(0.0) * 1e3, losses[pattern, world] * 1e3,
            )  # fmt: skip
        large_s = _mean_round(spec, world, large_floats, max(6, rounds // 2), pattern=None).round_s
        small_s = _mean_round(spec, world, SMALL_FLOATS, max(6, rounds // 2), pattern=None).round_s
        slowdown = crowded_bytes(perf, world, large - small, large_s - small_s)
        if slowdown is not None:
            slowdowns[world] = slowdown
    # The model slows bytes by 1 + crowding * (n - 1), n the workers running at once: the
    # least-squares fit over the worlds measured (averaging each world's own slope would weigh
    # W=2 as much as a world 3x larger).
    at_once = {w: perf.running_at_once(w) - 1 for w in slowdowns}
    fit = (
        sum(at_once[w] * (r - 1.0) for w, r in slowdowns.items()) / sum(n**2 for n in at_once.values())
        if any(at_once.values())
        else 0.0
    )
    # A step right after a wait runs on cold caches (and a core that may be asleep).
    figures: dict[str, float] = {"crowding": max(fit, 0.0), "step_wake_s": statistics.fmean(wakes)}
    for pattern in (*CALIBRATED_PATTERNS, RING):
        top = losses[pattern, worlds[-1]]
        # A ring rank waits on at most 2 neighbours: the model grows its loss up to 3 workers.
        further = (min(worlds[-1], 3) if pattern == RING else worlds[-1]) - 2
        per_worker = (top - losses[pattern, 2]) / further if further > 0 else 0.0
        figures.update(_pattern_fields(pattern, wait_s=losses[pattern, 2], wait_per_worker_s=max(per_worker, 0.0)))
    # Each pattern with large values, round after round: what its bytes take in real rounds
    # beyond the figures so far (the ranks move them while the others poll and compute).
    fitted = _replaced(perf, figures)
    store_moves_bytes = any(perf.server_bandwidth(op) for op in ("put", "get"))
    store_factors: list[float] = []
    for pattern in CALIBRATED_PATTERNS:
        factors = []
        for world in worlds:

            def slowed(excess: float, world: int = world, pattern: str = pattern, store: bool = False) -> float:
                changed = (
                    {"store_bytes_slowdown": 1.0 + excess}
                    if store
                    else _pattern_fields(pattern, bytes_slowdown=1.0 + excess)
                )
                modelled = _replaced(fitted, changed)
                return collective(modelled, pattern, world, large - header, math.inf, polling, header).seconds

            unslowed = collective(fitted, pattern, world, large - header, math.inf, polling, header)
            store_sets = unslowed.phases["chain"] < unslowed.phases["store_busy"]
            if store_sets and not store_moves_bytes:
                factors.append(1.0)  # the store's requests set these rounds: the wait losses have them
                continue
            probe = _mean_round(spec, world, large_floats, max(6, rounds // 2), pattern=pattern)
            measured = probe.round_s - probe.step_s
            if store_sets:  # the store, not the workers' bytes: what the store's bytes take in real rounds
                factors.append(1.0)
                store = _solve_increasing(functools.partial(slowed, store=True), measured, _MAX_STORE_SLOWDOWN - 1.0)
                store_factors.append(1.0 + store)
            else:
                factors.append(1.0 + _solve_increasing(slowed, measured, high=_MAX_SLOWDOWN - 1.0))
            log.debug(
                "%s %s W=%d, large values: round %.2f ms, modelled %.2f ms: %s slowdown %.2f",
                spec.kind, pattern, world, measured * 1e3, unslowed.seconds * 1e3,
                "store bytes" if store_sets else "bytes", store_factors[-1] if store_sets else factors[-1],
            )  # fmt: skip
        figures.update(_pattern_fields(pattern, bytes_slowdown=statistics.fmean(factors)))
    figures["store_bytes_slowdown"] = statistics.fmean(store_factors) if store_factors else 1.0
    return ExchangeFigures(**figures)


def _replaced(perf: ChannelPerf, figures: Mapping[str, float]) -> ChannelPerf:
    """``perf`` with the figures named: ``dataclasses.replace`` by names made at run time, which a type
    checker cannot match to fields (so Any: each one is a float field of ``ChannelPerf``)."""
    changes: dict[str, Any] = dict(figures)
    return dataclasses.replace(perf, **changes)


def _pattern_fields(pattern: str, **figures: float) -> dict[str, float]:
    """The profile's names of ``pattern``'s own figures (ScatterReduce's carry ``sr_``, the ring's ``ring_``)."""
    prefix = {"scatter_reduce": "sr_", RING: "ring_"}.get(pattern, "")
    return {f"{prefix}{name}": figure for name, figure in figures.items()}
