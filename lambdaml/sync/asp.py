"""ASP and SSP: workers push additive updates and merge whatever others have pushed.

Every update is a write-once key numbered by its writer (rank r's n-th push), so no push
is lost or applied twice, on any channel: a reader probes the next numbers of every other
rank and applies only contiguous runs. (A shared atomic counter would find new updates
in one read, but a writer that dies between taking a number and writing its update
leaves a hole every reader waits on; per-writer numbers cannot have holes.)

The merge after a push brings in the updates that were pushed while this worker computed
its own, which is exactly the staleness its update saw; it is recorded per push. Under
SSP a worker also waits until no other worker is more than ``staleness`` pushes behind it.
Updates that every worker has read are deleted as the job goes, so storage stays bounded.

On Lambda a worker checkpoints its read position with its model, and the published
position (which bounds the deletion) is the checkpointed one, so a resumed worker finds
every update it had not yet checkpointed. Its own pushes since the checkpoint are already
in the log, applied by the others: it replays them instead of pushing again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

import numpy as np

from lambdaml import codec, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.comm.base import check_finite
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.errors import CodecError, SyncTimeout
from lambdaml.sync.base import SyncProtocol, mean_loss

#: Pushes between publishing this worker's read cursor (and, on rank 0, pruning).
PRUNE_EVERY = 16


def encode_update(rank: int, delta: Array) -> bytes:
    return codec.encode_bundle({"rank": np.array([rank], dtype=np.int64), "delta": delta})


def decode_update(raw: bytes, what: str) -> tuple[int, Array]:
    bundle = codec.decode_bundle(raw, what=what)
    try:
        return int(bundle["rank"][0]), bundle["delta"]
    except (KeyError, IndexError):
        raise CodecError(f"{what} is not an update") from None


class UpdateLog:
    """Per-rank numbered updates: rank r's n-th push is ``asp_rank_update(job, r, n)``."""

    #: Most next updates of one rank one probe asks for. A probe asks for one more than the
    #: rank had new last time, so in steady state a missing key or two is read per rank, not
    #: a whole window (on S3 every key asked for is a GET).
    MAX_WINDOW = 16

    def __init__(
        self, channel: Channel, job_id: str, rank: int, world_size: int, timeout_s: float, attempt: int = 1
    ) -> None:
        self.channel = channel
        self.job_id = job_id
        self.attempt = attempt
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.pushed = 0
        self.applied_from = [0] * world_size  # updates applied per writer (own ones included)
        self.deleted_upto = [0] * world_size
        self._window = [2] * world_size
        self.replaying = False  # resumed: this rank's next numbers may already be written

    def append(self, payload: bytes) -> bytes | None:
        """Write this rank's next update; when replaying one already written, return that instead."""
        self.pushed += 1
        key = keys.asp_rank_update(self.job_id, self.rank, self.pushed, self.attempt)
        self.applied_from[self.rank] = self.pushed
        if self.replaying:
            written = self.channel.get_many([key]).get(key)
            if written is not None:
                return written
            self.replaying = False
        self.channel.put(key, payload)
        return None

    def read_new(self) -> list[tuple[str, bytes]]:
        """Updates of other ranks not applied yet, each exactly once: (key, value) pairs."""
        updates: list[tuple[str, bytes]] = []
        others = [r for r in range(self.world_size) if r != self.rank]
        before = list(self.applied_from)
        ranks = others
        while ranks:
            probes = {
                r: [
                    keys.asp_rank_update(self.job_id, r, self.applied_from[r] + i, self.attempt)
                    for i in range(1, self._window[r] + 1)
                ]
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
                else:  # the whole window was there: more may be right behind, ask for twice as many
                    self._window[r] = min(2 * self._window[r], self.MAX_WINDOW)
                    more.append(r)
            ranks = more
        for r in others:  # next time, ask for one more than came this time
            self._window[r] = min(self.applied_from[r] - before[r] + 1, self.MAX_WINDOW)
        return updates

    def cursor(self) -> Array:
        """How far this worker has read, per writer."""
        return np.array(self.applied_from, dtype=np.int64)

    def prune(self, cursors: list[Array]) -> None:
        """Delete updates every rank has read (rank 0 calls this)."""
        stale = []
        for writer in range(self.world_size):
            horizon = min(int(c[writer]) for c in cursors)
            first = self.deleted_upto[writer] + 1
            stale += [keys.asp_rank_update(self.job_id, writer, s, self.attempt) for s in range(first, horizon + 1)]
            self.deleted_upto[writer] = max(self.deleted_upto[writer], horizon)
        if stale:
            self.channel.delete(stale)

    def version(self) -> int:
        """How many updates all workers have pushed, as far as known here."""
        return sum(self.applied_from)


class AsyncUpdates:
    """One worker's side of ASP (``staleness=None``) or SSP (a bound on how far it may run ahead)."""

    def __init__(self, comm: ChannelCommunicator, *, staleness: int | None = None) -> None:
        self.comm = comm
        self.staleness = staleness
        self.log = UpdateLog(comm.channel, comm.job_id, comm.rank, comm.world_size, comm.timeout_s, comm.attempt)
        self.staleness_seen: list[int] = []
        self.ssp_wait_s = 0.0
        # Set on Lambda: publish the read position of the last checkpoint, not the live one,
        # so that nothing a resumed worker will read again is deleted.
        self.resumable = False
        self._checkpointed_cursor: Array = np.zeros(comm.world_size, dtype=np.int64)

    def push_pull(self, delta: Array) -> Array:
        """Publish this worker's update; return the sum of the other workers' new updates."""
        check_finite(delta, self.comm.rank, "update")
        started = time.perf_counter()
        try:
            written = self.log.append(encode_update(self.comm.rank, delta))
            total, count = self._merge(delta)
            if written is not None:  # replayed: the others applied the update written before
                _, before = decode_update(written, f"rank {self.comm.rank}'s update {self.log.pushed}")
                if before.shape != delta.shape:
                    raise CodecError(f"rank {self.comm.rank}'s update {self.log.pushed} has the wrong shape")
                total += before - delta
            self.staleness_seen.append(count)
            if self.staleness is not None:
                total += self._wait_for_stragglers(delta)
            if self.log.pushed % PRUNE_EVERY == 0:
                self._housekeeping()
            return total
        finally:
            self.comm.comm_s += time.perf_counter() - started

    def _merge(self, like: Array) -> tuple[Array, int]:
        total = np.zeros_like(like)
        updates = self.log.read_new()
        for key, raw in updates:
            _, delta = decode_update(raw, key)
            if delta.shape != like.shape:
                raise CodecError(f"{key} has shape {delta.shape}, expected {like.shape}")
            total += delta
        return total, len(updates)

    def _wait_for_stragglers(self, like: Array) -> Array:
        """SSP: block while some worker is more than ``staleness`` pushes behind this one."""
        total = np.zeros_like(like)
        needed = self.log.pushed - (self.staleness or 0)
        deadline = time.monotonic() + self.comm.timeout_s
        delays = iter(self.comm.channel.backoff().delays())
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
        cursor = self._checkpointed_cursor if self.resumable else self.log.cursor()
        channel.put(keys.asp_cursor(job, self.comm.rank, self.comm.attempt), codec.encode(cursor))
        if self.comm.rank == 0:
            self.comm.in_background(self._prune)

    def _prune(self) -> None:
        job = self.comm.job_id
        found = self.comm.channel.get_many(
            [keys.asp_cursor(job, r, self.comm.attempt) for r in range(self.comm.world_size)]
        )
        if len(found) == self.comm.world_size:
            self.log.prune([codec.decode(raw, dtype=np.int64) for raw in found.values()])

    def drain(self, like: Array) -> Array:
        """At the end: wait until every worker is done pushing, then merge the rest.

        Afterwards every worker has applied every update exactly once.
        """
        started = time.perf_counter()
        try:
            job = self.comm.job_id
            self.comm.channel.put(
                keys.asp_done(job, self.comm.rank, self.comm.attempt), codec.encode(np.array([self.log.pushed]))
            )
            done_keys = [keys.asp_done(job, r, self.comm.attempt) for r in range(self.comm.world_size)]
            done = self.comm.channel.wait_for(done_keys, self.comm.timeout_s)
            totals = [int(codec.decode(done[k], dtype=np.int64)[0]) for k in done_keys]
            total = np.zeros_like(like)
            deadline = time.monotonic() + self.comm.timeout_s
            delays = iter(self.comm.channel.backoff().delays())
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

    def checkpointed(self) -> None:
        """The worker saved a checkpoint: what it had read up to then may now be deleted."""
        self._checkpointed_cursor = self.log.cursor()

    def state_dict(self) -> dict[str, Array]:
        return {
            "pushed": np.array([self.log.pushed]),
            "applied_from": self.log.cursor(),
            "staleness_seen": np.array(self.staleness_seen, dtype=np.int64),
        }

    def load_state_dict(self, state: Mapping[str, Array]) -> None:
        """Resume at a checkpoint; the pushes made after it are replayed, not repeated."""
        self.log.pushed = int(state["pushed"][0])
        self.log.applied_from = [int(v) for v in state["applied_from"]]
        self.staleness_seen = [int(v) for v in state["staleness_seen"]]
        self._checkpointed_cursor = self.log.cursor()
        self.log.replaying = True

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


class AsyncProtocol(SyncProtocol):
    """ASP/SSP as a protocol: no collective sums; each worker steps on its own and shares the step.

    A gradient step is taken on this worker's own gradient and its change of the model is
    pushed (Hogwild over storage); model averaging pushes 1/W of the local progress and
    adopts the global model as far as this worker knows it.
    """

    asynchronous = True
    checkpoint_prefix = "asp."

    def __init__(self, comm: ChannelCommunicator, *, staleness: int | None = None) -> None:
        super().__init__(comm)
        self.updates = AsyncUpdates(comm, staleness=staleness)

    def sum(self, values: Array) -> Array:
        raise TypeError("ASP and SSP have no collective sums: the algorithm runs only under protocol 'bsp'")

    def sum_with(self, vector: Array, extras: Array) -> tuple[Array, Array]:
        return self.sum(vector), extras

    def gradients(self, grad: Array, count: int, loss: float) -> tuple[Array, float, float]:
        return grad, count, loss  # this worker's own; ``sharing`` sends the step taken on it

    @contextlib.contextmanager
    def sharing(self, params: Array) -> Iterator[None]:
        """Push the change the step inside makes to ``params`` and merge the others' (not after an error)."""
        before = params.copy()
        yield
        params += self.updates.push_pull(params - before)

    def average(self, model: Array, reference: Array, count: float, loss_sum: float) -> tuple[Array, float]:
        contribution = (model - reference) / self.comm.world_size
        # The loss is this worker's own: no collective sums it.
        return reference + (contribution + self.updates.push_pull(contribution)), mean_loss(loss_sum, count)

    def finish(self, params: Array) -> Array:
        """Merge every update still outstanding: afterwards each worker has applied every update once."""
        params += self.updates.drain(params)
        return params

    def prepare_restarts(self) -> None:
        # Publish the read position of the last checkpoint, not the live one, and replay
        # (rather than push again) the updates a retry without a checkpoint already wrote.
        self.updates.resumable = True
        self.updates.log.replaying = True

    def progress(self) -> int:
        return self.updates.log.pushed

    def checkpointed(self) -> None:
        self.updates.checkpointed()

    def state_dict(self) -> dict[str, Array]:
        return self.updates.state_dict()

    def load_state_dict(self, state: Mapping[str, Array]) -> None:
        self.updates.load_state_dict(state)

    def stats(self) -> dict[str, float]:
        return self.updates.stats()
