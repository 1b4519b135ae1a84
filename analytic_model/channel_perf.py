"""How one channel moves values: the figures the model times every put, get and wait with."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from analytic_model.records import INTERNAL, KEY

#: The patterns ScatterReduce's own figures (``sr_*``) apply to: the 2-D one waits and moves its
#: bytes as ScatterReduce does, in rows and columns.
_SR_FIGURES = ("scatter_reduce", "scatter_reduce_2d")


@dataclass(frozen=True)
class ChannelPerf:
    """How one channel moves values, as seen from one worker and at the shared store.

    A call that moves k values of s bytes takes ``latency + (k - 1) * extra + k * s /
    bandwidth`` on the worker; the store (or, locally, the machine all processes share)
    spends ``server_*_s`` per request and moves at most ``server_*_Bps``.
    """

    kind: str = field(metadata=KEY)  # the channel: its key in the profile
    latency_put_s: float
    latency_get_s: float
    extra_put_s: float
    extra_get_s: float
    bandwidth_put_Bps: float
    bandwidth_get_Bps: float
    server_put_s: float
    server_get_s: float
    server_delete_s: float | None = None  # the store's time for one batch delete (None: as a put)
    server_put_Bps: float | None = None
    server_get_Bps: float | None = None
    # Where a ranged read costs the store the whole object (moto reads it all and slices it), the
    # rate it reads the object at (None: the store reads only the range, as S3 does).
    server_range_Bps: float | None = None
    max_item_bytes: int | None = None
    get_batch: int = 1  # keys one get request carries (MGET, multi-get, BatchGetItem); S3 reads one
    put_batch: int = 1  # values one put request carries (pipelined SETs, multi-set); S3 and DynamoDB write one
    wait_s: float = 0.0  # what a worker waiting on two others' values loses beyond the transfers
    wait_per_worker_s: float = 0.0  # ... and per further worker (stragglers, polling, scheduling)
    sr_wait_s: float | None = None  # ScatterReduce's own figures, where calibrated (None: as above)
    sr_wait_per_worker_s: float | None = None
    ring_wait_s: float | None = None  # the ring methods' neighbour exchange, where calibrated (None: as above)
    ring_wait_per_worker_s: float | None = None
    # Each further worker moving bytes at once slows a worker's bytes by this fraction; on shared
    # cores at most as many run at once as there are cores (``crowd_factor``).
    crowding: float = 0.0
    # A pattern's bytes in real rounds over one worker's transfers crowded as above: on a shared
    # machine a rank moves them while the others poll and compute on the same cores and caches.
    bytes_slowdown: float = 1.0
    sr_bytes_slowdown: float | None = None  # ScatterReduce's own, where calibrated (None: as above)
    # The store's bytes in real rounds over its loaded probes' rate (``server_*_Bps``), where the
    # store sets a pattern's rounds (moto's: 1.2 and 5.0 in two calibrations an hour apart).
    store_bytes_slowdown: float = 1.0
    step_wake_s: float = 0.0  # a worker's first step after a wait takes this much longer (cold caches)
    cleanup_cpu_s: float = 0.0  # a rank's CPU deleting its previous round's keys: its background thread holds the GIL
    server_growth: float = 0.0  # the store's time per request grows by this fraction per client beyond two
    cpu_share_put: float = 0.0  # share of a put's time that is the worker's own CPU (client code, copies)
    cpu_share_get: float = 0.0
    shared_cores: float | None = field(default=None, metadata=INTERNAL)  # cores all workers share: faas.shared_cores
    # Where a job's values carry a MAC (``Profile.channel(authenticated=True)``), the rate a worker
    # hashes them at, sealing each value it puts and opening each it gets: compute.mac_Bps.
    mac_Bps: float | None = field(default=None, metadata=INTERNAL)
    # Values over ``big_from_bytes`` (where a malloc that maps large buffers on their own faults
    # each one in afresh) move at the rates measured on a ``big_value_bytes`` value (None: as the others).
    big_value_bytes: float | None = None
    big_from_bytes: float | None = None
    bandwidth_put_big_Bps: float | None = None
    bandwidth_get_big_Bps: float | None = None
    # Direct links (``analytic_model.links``): vectors of at most this many bytes go by recursive
    # doubling, larger ones by reduce-scatter and all-gather (None: a store's channel).
    small_bytes: float | None = None

    def latency(self, op: str) -> float:
        return float(getattr(self, f"latency_{op}_s"))

    def extra(self, op: str) -> float:
        return float(getattr(self, f"extra_{op}_s"))

    def bandwidth(self, op: str) -> float:
        return float(getattr(self, f"bandwidth_{op}_Bps"))

    def bytes_s(self, op: str, size: float) -> float:
        """Seconds one worker's call spends on the bytes of one value of ``size`` bytes."""
        big = getattr(self, f"bandwidth_{op}_big_Bps")
        if big is not None and self.big_from_bytes is not None and size > self.big_from_bytes:
            return size / float(big)
        return size / self.bandwidth(op)

    def running_at_once(self, clients: float) -> float:
        """Of ``clients`` workers making calls, how many run at once: on shared cores, at most one
        a core (the rest wait for one: ``cpu_stretch``)."""
        return min(clients, self.shared_cores) if self.shared_cores else clients

    def crowd_factor(self, clients: float) -> float:
        """How much slower a worker's bytes move while ``clients`` workers move theirs at once.

        Linear in all W workers, Redis's probes at 2 and 4 processes on 2 cores (slowed 1.6-2.1x,
        alike at both) fitted 0.15-0.58 a worker from one calibration to the next, and at W = 8
        the model's ScatterReduce at d = 1e7 came out at 1.0-1.9x the 750-1000 ms measured.
        """
        return 1.0 + self.crowding * (self.running_at_once(clients) - 1)

    def mac_s(self, nbytes: float, clients: float = 1) -> float:
        """A worker's CPU hashing ``nbytes`` of authenticated values while ``clients`` workers
        compute at once (on shared cores, each gets its share of them)."""
        if not self.mac_Bps:
            return 0.0
        return nbytes / self.mac_Bps * clients / self.running_at_once(clients)

    def server_request(self, op: str, clients: int = 2) -> float:
        """The store's time per request (``put``, ``get``, ``delete``) while ``clients`` workers use it
        (a local store shares its CPU)."""
        seconds = getattr(self, f"server_{op}_s")
        if seconds is None:  # a delete the profile has no figure for: as a put
            seconds = self.server_put_s
        return float(seconds) * (1.0 + self.server_growth * max(clients - 2, 0))

    def server_bandwidth(self, op: str) -> float | None:
        value = getattr(self, f"server_{op}_Bps")
        return None if value is None else float(value)

    def cpu_stretch(self, op: str, clients: float) -> float:
        """How much longer a call takes while ``clients`` workers make calls at once on cores they share."""
        if not self.shared_cores or clients <= self.shared_cores:
            return 1.0
        share = float(getattr(self, f"cpu_share_{op}"))
        return 1.0 + share * (clients / self.shared_cores - 1.0)

    @property
    def cleanup_delay_s(self) -> float:
        """What a rank's clean-up thread delays it by: its CPU where the rank's own calls need the
        CPU too (their CPU share); the rest overlaps the rank waiting on the store."""
        return self.cleanup_cpu_s * max(self.cpu_share_put, self.cpu_share_get)

    def straggle(self, workers: int, pattern: str = "allreduce") -> float:
        """Expected loss of one wait of ``pattern`` for the values of ``workers`` symmetric workers."""
        base, per_worker = self.wait_s, self.wait_per_worker_s
        if pattern in _SR_FIGURES and self.sr_wait_s is not None:
            base, per_worker = self.sr_wait_s, self.sr_wait_per_worker_s or 0.0
        elif pattern == "ring" and self.ring_wait_s is not None:
            base, per_worker = self.ring_wait_s, self.ring_wait_per_worker_s or 0.0
        return base + max(workers - 2, 0) * per_worker

    def slowdown(self, pattern: str) -> float:
        """What ``pattern``'s rounds do to its bytes beyond the transfers and crowding."""
        if pattern in _SR_FIGURES and self.sr_bytes_slowdown is not None:
            return self.sr_bytes_slowdown
        return self.bytes_slowdown

    def round_trips(self, op: str, keys: float) -> float:
        """Requests that carry ``keys`` values: batched where the channel batches them."""
        batch = self.get_batch if op == "get" else self.put_batch
        if batch > 1:
            return float(math.ceil(keys / batch)) if keys > 0 else 0.0
        return keys
