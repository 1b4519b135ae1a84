"""ASP and SSP: workers push additive updates and merge whatever others have pushed.

Every update is a write-once key, so no push is lost or applied twice:

- on channels with an atomic counter (Redis, Memcached, DynamoDB, memory) a push takes
  the next number of the job's version counter and writes its update under it; a reader
  reads the counter and fetches exactly the numbers it has not applied;
- on S3, which has no counter, each rank numbers its own updates (versioned keys) and a
  reader probes the next numbers of every other rank.

The merge after a push brings in the updates that were pushed while this worker computed
its own, which is exactly the staleness its update saw; it is recorded per push. Under
SSP a worker also waits until no other worker is more than ``staleness`` pushes behind it.
Updates that every worker has read are deleted as the job goes, so storage stays bounded.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod

import numpy as np

from lambdaml import codec, keys
from lambdaml.channels import Backoff, Channel
from lambdaml.comm.base import check_finite
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.errors import CodecError, SyncTimeout

log = logging.getLogger(__name__)

#: Pushes between publishing this worker's read cursor (and, on rank 0, pruning).
PRUNE_EVERY = 16


def encode_update(rank: int, delta: np.ndarray) -> bytes:
    return codec.encode_bundle({"rank": np.array([rank], dtype=np.int64), "delta": delta})


def decode_update(raw: bytes, what: str) -> tuple[int, np.ndarray]:
    bundle = codec.decode_bundle(raw, what=what)
    try:
        return int(bundle["rank"][0]), bundle["delta"]
    except (KeyError, IndexError):
        raise CodecError(f"{what} is not an update") from None


class UpdateLog(ABC):
    """Where updates are written and how a reader finds the ones it has not applied."""

    def __init__(self, channel: Channel, job_id: str, rank: int, world_size: int, timeout_s: float) -> None:
        self.channel = channel
        self.job_id = job_id
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.pushed = 0
        self.applied_from = [0] * world_size  # updates applied per writer (own ones included)

    @abstractmethod
    def append(self, payload: bytes) -> None:
        """Write one update."""

    @abstractmethod
    def read_new(self) -> list[tuple[str, bytes]]:
        """Updates of other ranks not applied yet, each exactly once: (key, value) pairs."""

    @abstractmethod
    def cursor(self) -> np.ndarray:
        """How far this worker has read, in the form ``prune`` takes."""

    @abstractmethod
    def prune(self, cursors: list[np.ndarray]) -> None:
        """Delete updates every rank has read (rank 0 calls this)."""

    @abstractmethod
    def version(self) -> int:
        """The job's version: how many updates all workers have pushed, as far as known here."""


class CounterLog(UpdateLog):
    """Updates numbered by the channel's atomic counter: one counter read finds all new ones."""

    def __init__(self, channel: Channel, job_id: str, rank: int, world_size: int, timeout_s: float) -> None:
        super().__init__(channel, job_id, rank, world_size, timeout_s)
        self.counter = keys.counter_key(job_id, "asp-version")
        self.read_upto = 0  # every version <= this has been applied
        self.own_versions: set[int] = set()
        self.deleted_upto = 0

    def append(self, payload: bytes) -> None:
        version = self.channel.incr(self.counter)
        self.channel.put(keys.asp_version_update(self.job_id, version), payload)
        self.own_versions.add(version)
        self.pushed += 1
        self.applied_from[self.rank] = self.pushed

    def read_new(self) -> list[tuple[str, bytes]]:
        latest = self.version()
        wanted = [
            keys.asp_version_update(self.job_id, v)
            for v in range(self.read_upto + 1, latest + 1)
            if v not in self.own_versions
        ]
        # A counted version is written right after its increment: wait for it, bounded.
        found = self.channel.wait_for(wanted, self.timeout_s) if wanted else {}
        updates = [(key, found[key]) for key in wanted]
        for key, raw in updates:
            writer, _ = decode_update(raw, key)
            self.applied_from[writer] += 1
        self.own_versions = {v for v in self.own_versions if v > latest}
        self.read_upto = latest
        return updates

    def cursor(self) -> np.ndarray:
        return np.array([self.read_upto], dtype=np.int64)

    def prune(self, cursors: list[np.ndarray]) -> None:
        horizon = min(int(c[0]) for c in cursors)
        if horizon > self.deleted_upto:
            stale = [keys.asp_version_update(self.job_id, v) for v in range(self.deleted_upto + 1, horizon + 1)]
            self.channel.delete(stale)
            self.deleted_upto = horizon

    def version(self) -> int:
        return self.channel.incr(self.counter, 0)


class SequenceLog(UpdateLog):
    """Per-rank numbered updates (versioned keys) for channels without a counter."""

    #: How many next updates of each rank one probe asks for.
    WINDOW = 4

    def __init__(self, channel: Channel, job_id: str, rank: int, world_size: int, timeout_s: float) -> None:
        super().__init__(channel, job_id, rank, world_size, timeout_s)
        self.deleted_upto = [0] * world_size

    def append(self, payload: bytes) -> None:
        self.pushed += 1
        self.channel.put(keys.asp_rank_update(self.job_id, self.rank, self.pushed), payload)
        self.applied_from[self.rank] = self.pushed

    def read_new(self) -> list[tuple[str, bytes]]:
        updates: list[tuple[str, bytes]] = []
        ranks = [r for r in range(self.world_size) if r != self.rank]
        while ranks:
            probes = {
                r: [keys.asp_rank_update(self.job_id, r, self.applied_from[r] + i) for i in range(1, self.WINDOW + 1)]
                for r in ranks
            }
            found = self.channel.get_many([k for ks in probes.values() for k in ks])
            more = []
            for r, wanted in probes.items():
                for key in wanted:  # only the contiguous run, so that none is skipped
                    if key not in found:
                        break
                    updates.append((key, found[key]))
                    self.applied_from[r] += 1
                else:
                    more.append(r)
            ranks = more  # ranks that may have more right behind
        return updates

    def cursor(self) -> np.ndarray:
        return np.array(self.applied_from, dtype=np.int64)

    def prune(self, cursors: list[np.ndarray]) -> None:
        stale = []
        for writer in range(self.world_size):
            horizon = min(int(c[writer]) for c in cursors)
            first = self.deleted_upto[writer] + 1
            stale += [keys.asp_rank_update(self.job_id, writer, s) for s in range(first, horizon + 1)]
            self.deleted_upto[writer] = max(self.deleted_upto[writer], horizon)
        if stale:
            self.channel.delete(stale)

    def version(self) -> int:
        return sum(self.applied_from)


class AsyncUpdates:
    """One worker's side of ASP (``staleness=None``) or SSP (a bound on how far it may run ahead)."""

    def __init__(self, comm: ChannelCommunicator, *, staleness: int | None = None) -> None:
        self.comm = comm
        self.staleness = staleness
        log_type = CounterLog if comm.channel.has_counter else SequenceLog
        self.log: UpdateLog = log_type(comm.channel, comm.job_id, comm.rank, comm.world_size, comm.timeout_s)
        self.staleness_seen: list[int] = []
        self.ssp_wait_s = 0.0

    def push_pull(self, delta: np.ndarray) -> np.ndarray:
        """Publish this worker's update; return the sum of the other workers' new updates."""
        check_finite(delta, self.comm.rank, "update")
        started = time.perf_counter()
        try:
            self.log.append(encode_update(self.comm.rank, delta))
            total, count = self._merge(delta)
            self.staleness_seen.append(count)
            if self.staleness is not None:
                total += self._wait_for_stragglers(delta)
            if self.log.pushed % PRUNE_EVERY == 0:
                self._housekeeping()
            return total
        finally:
            self.comm.comm_s += time.perf_counter() - started

    def _merge(self, like: np.ndarray) -> tuple[np.ndarray, int]:
        total = np.zeros_like(like)
        updates = self.log.read_new()
        for key, raw in updates:
            _, delta = decode_update(raw, key)
            if delta.shape != like.shape:
                raise CodecError(f"{key} has shape {delta.shape}, expected {like.shape}")
            total += delta
        return total, len(updates)

    def _wait_for_stragglers(self, like: np.ndarray) -> np.ndarray:
        """SSP: block while some worker is more than ``staleness`` pushes behind this one."""
        total = np.zeros_like(like)
        needed = self.log.pushed - (self.staleness or 0)
        deadline = time.monotonic() + self.comm.timeout_s
        delays = iter(Backoff().delays())
        started = time.perf_counter()
        while min(self.log.applied_from) < needed:
            if time.monotonic() > deadline:
                slowest = int(np.argmin(self.log.applied_from))
                raise SyncTimeout(
                    f"SSP: rank {slowest} stayed more than {self.staleness} pushes behind for {self.comm.timeout_s:g}s"
                )
            time.sleep(next(delays))
            total += self._merge(like)[0]
        self.ssp_wait_s += time.perf_counter() - started
        return total

    def _housekeeping(self) -> None:
        channel, job = self.comm.channel, self.comm.job_id
        channel.put(keys.asp_cursor(job, self.comm.rank), codec.encode(self.log.cursor()))
        if self.comm.rank == 0:
            self.comm.in_background(self._prune)

    def _prune(self) -> None:
        job = self.comm.job_id
        found = self.comm.channel.get_many([keys.asp_cursor(job, r) for r in range(self.comm.world_size)])
        if len(found) == self.comm.world_size:
            self.log.prune([codec.decode(raw, dtype=np.int64) for raw in found.values()])

    def drain(self, like: np.ndarray) -> np.ndarray:
        """At the end: wait until every worker is done pushing, then merge the rest.

        Afterwards every worker has applied every update exactly once.
        """
        started = time.perf_counter()
        try:
            job = self.comm.job_id
            self.comm.channel.put(keys.asp_done(job, self.comm.rank), codec.encode(np.array([self.log.pushed])))
            done_keys = [keys.asp_done(job, r) for r in range(self.comm.world_size)]
            done = self.comm.channel.wait_for(done_keys, self.comm.timeout_s)
            totals = [int(codec.decode(done[k], dtype=np.int64)[0]) for k in done_keys]
            total = np.zeros_like(like)
            deadline = time.monotonic() + self.comm.timeout_s
            delays = iter(Backoff().delays())
            while True:
                total += self._merge(like)[0]
                behind = [r for r in range(self.comm.world_size) if self.log.applied_from[r] < totals[r]]
                if not behind:
                    return total
                if time.monotonic() > deadline:
                    raise SyncTimeout(f"ASP: the updates of rank {behind[0]} never arrived")
                time.sleep(next(delays))
        finally:
            self.comm.comm_s += time.perf_counter() - started

    def stats(self) -> dict[str, float]:
        seen = np.array(self.staleness_seen or [0])
        return {
            "version": float(self.log.version()),
            "pushes": float(self.log.pushed),
            "applied": float(sum(self.log.applied_from)),
            "staleness_mean": float(seen.mean()),
            "staleness_max": float(seen.max()),
            "ssp_wait_s": self.ssp_wait_s,
        }
