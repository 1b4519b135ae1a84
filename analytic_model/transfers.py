"""One worker's calls on a channel, the store serving them all, and polling for values not there yet."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from analytic_model.channel_perf import ChannelPerf
from analytic_model.kinds import described
from analytic_model.profile import Profile


def _parts(channel: ChannelPerf, size: float) -> int:
    """Items a value of ``size`` bytes is stored in (values over the item limit are chunked)."""
    limit = channel.max_item_bytes
    return 1 if not limit or size <= limit else math.ceil(size / limit)


def items_of(channel: ChannelPerf, size: float) -> int:
    """Requests one value costs: its parts, plus the manifest of a chunked value."""
    parts = _parts(channel, size)
    return parts if parts == 1 else parts + 1


def call_s(channel: ChannelPerf, op: str, count: int, size: float, crowd: int = 1, slowdown: float = 1.0) -> float:
    """One worker's call that puts or gets ``count`` values of ``size`` bytes (concurrently or batched).

    ``crowd``: workers making calls at the same time. On a shared machine they slow each
    other: their bytes crowd (``crowding``), and the CPU part of every call waits for a core.
    ``slowdown``: what the pattern's rounds do to the bytes beyond that (``ChannelPerf.slowdown``).
    Where the job's values carry a MAC, the worker hashes each one as well (``ChannelPerf.mac_s``).
    """
    if count <= 0:
        return 0.0
    items = count * items_of(channel, size)
    byte_s = count * channel.bytes_s(op, size) * channel.crowd_factor(crowd) * slowdown
    seconds = channel.latency(op) + (items - 1) * channel.extra(op) + byte_s
    if _parts(channel, size) > 1 and not described(channel.kind).ordered_writes:
        # Manifests go in a second batch; a reader needs the manifest first. Where the store keeps
        # a request's order, a manifest goes in its parts' request, and a reader that knows the
        # value's length (as the patterns do) reads it with the parts: one round trip each way.
        seconds += channel.latency(op)
    return seconds * channel.cpu_stretch(op, crowd) + channel.mac_s(count * size, crowd)


def store_s(channel: ChannelPerf, op: str, requests: float, nbytes: float, clients: int = 2) -> float:
    """Time the shared store (or the shared local machine) spends on ``requests`` moving ``nbytes``."""
    seconds = requests * channel.server_request(op, clients)
    bandwidth = channel.server_bandwidth(op)
    if bandwidth:
        seconds += nbytes / bandwidth * channel.store_bytes_slowdown
    return seconds


def phase_s(channel: ChannelPerf, op: str, clients: int, count: int, size: float, slowdown: float = 1.0) -> float:
    """``clients`` workers each move ``count`` values at once: the slower of the worker and the store."""
    if clients <= 0 or count <= 0:
        return 0.0
    trips = clients * channel.round_trips(op, count * items_of(channel, size))
    store = store_s(channel, op, trips, clients * count * size, clients)
    return max(call_s(channel, op, count, size, clients, slowdown), store)


@dataclass(frozen=True)
class Poll:
    """One poll: how long it takes, and how long after it is sent it sees the store's state."""

    seconds: float
    sees_after_s: float


def poll_of(channel: ChannelPerf, keys: int, others: int) -> Poll:
    """One poll for ``keys`` missing values while ``others`` workers keep the store busy.

    Unloaded, a poll takes its latency and sees the store half-way. Where the store serves
    requests one after another (moto, a saturated cache) it waits its turn behind about one
    request of each other worker, and sees the store when its turn comes.
    """
    trips = channel.round_trips("get", keys)
    unloaded = call_s(channel, "get", keys, 0)
    per_request = channel.server_request("get", others + 1)
    queue = per_request * others
    seconds = max(unloaded, queue + per_request * trips)
    return Poll(seconds, max(unloaded / 2, queue))


# A wait's length is taken to vary evenly across this fraction either side of its model, sampled this often.
_WAIT_SPREAD = 0.5
_WAIT_SAMPLES = 8


@dataclass(frozen=True)
class Polling:
    """``wait_for``'s schedule: polls ``initial``, then ``factor`` times longer, up to ``max``."""

    initial_s: float
    factor: float
    max_s: float

    @classmethod
    def of(cls, profile: Profile, kind: str) -> Polling:
        """The schedule of the ``kind`` channel's waits."""
        poll = profile.poll
        return cls(poll.channel_initial_s.get(kind, poll.initial_s), poll.factor, poll.max_s)

    def wait(self, waiting_s: float, poll: Poll) -> tuple[float, float]:
        """(expected delay after the data landed, expected polls that found nothing) for a wait of
        about ``waiting_s``.

        A wait's length varies from round to round with how the workers and the store are
        scheduled, and one fixed schedule's count of misses jumps by a whole poll where the
        wait crosses a poll: the expectation is over waits spread evenly across ±50% of it.
        """
        if waiting_s <= 0:
            return 0.0, 0.0
        lengths = (waiting_s * (1 - _WAIT_SPREAD * (1 - (2 * i + 1) / _WAIT_SAMPLES)) for i in range(_WAIT_SAMPLES))
        lates, misses = zip(*(self.scheduled_wait(length, poll) for length in lengths), strict=True)
        return statistics.fmean(lates), statistics.fmean(misses)

    def scheduled_wait(self, waiting_s: float, poll: Poll) -> tuple[float, float]:
        """(delay after the data landed, polls that found nothing) for a wait of exactly ``waiting_s``.

        A worker polls at once, then sleeps ``initial``, ``initial * factor`` ... between polls.
        A poll that sees the store before the data landed misses; the next sees it, on average
        half a gap after it landed. The delay returned excludes the part of the successful
        poll that the get which follows it already counts.
        """
        seen, delay, misses = poll.sees_after_s, self.initial_s, 0
        while seen < waiting_s:
            misses += 1
            gap = poll.seconds + delay
            if delay >= self.max_s:  # the interval stopped growing: count the rest at once
                misses += max(0, math.ceil((waiting_s - seen) / gap) - 1)
                break
            seen += gap
            delay = min(delay * self.factor, self.max_s)
        if misses == 0:
            return 0.0, 0.0
        return max(gap / 2 - poll.sees_after_s, 0.0), float(misses)
