"""The communicator for serverless workers: collectives over a storage channel."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from lambdaml import keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.channels.sealed import SealedChannel
from lambdaml.comm import PATTERNS
from lambdaml.comm.base import Communicator
from lambdaml.comm.patterns import PLAIN, ChunkCodec, Pattern
from lambdaml.comm.rounds import Round
from lambdaml.comm.trial import PatternTrial, rounds_text
from lambdaml.seal import Sealer

log = logging.getLogger(__name__)


class ChannelCommunicator(Communicator):
    """Rank, world size, a job namespace and a channel; the pattern decides the requests.

    The communicator owns the rounds: each collective call opens the next one (a
    ``Round``), so every key is written once, and the pattern or ring works only through
    it. Every rank remembers the keys it wrote, and deletes its own once every rank has moved
    past their round, in the background: the channel's size stays bounded however long the
    job runs, and no rank ever lists the store to find what to delete.

    Keys live under the job's ``attempt``, and every value is sealed under its key
    (``secret``: authenticated with the job's MAC key), so a value from another attempt,
    round, rank or chunk is refused rather than summed.
    """

    def __init__(
        self,
        channel: Channel,
        job_id: str,
        rank: int,
        world_size: int,
        *,
        pattern: str = "allreduce",
        timeout_s: float = 120.0,
        first_round: int = 0,
        extra_retention: int = 0,
        attempt: int = 1,
        secret: bytes | None = None,
        trial: PatternTrial | None = None,
    ) -> None:
        super().__init__(rank, world_size)
        self.channel: Channel = SealedChannel(channel, Sealer(secret))
        self.job_id = job_id
        self.attempt = attempt
        self.timeout_s = timeout_s
        self.round = first_round
        self.extra_retention = extra_retention
        self.pattern_name = pattern  # the pattern of the rounds after a trial, if any
        self._patterns: dict[str, Pattern] = {}  # by name: each one this run has used
        self._named(pattern)  # an unknown name fails here, not at the first round
        self.trial = trial  # None once settled (or never a trial)
        self.trial_round_s: dict[str, float] | None = None  # each contender's slowest-rank round, once settled
        self._last_pattern: str | None = None  # the pattern of this run's last round
        self._janitor = ThreadPoolExecutor(1, thread_name_prefix="comm-cleanup")
        self._cleanups: list[Future[Any]] = []
        self._written: dict[int, list[str]] = {}  # round -> the keys this rank stored in it

    def key(self, round_: int, tag: str, *, rank: int | None, chunk: int | None = None) -> str:
        return keys.comm_key(self.job_id, round_, tag, rank=rank, chunk=chunk, attempt=self.attempt)

    @property
    def pattern(self) -> Pattern:
        """The pattern of the rounds after a trial, if any (``pattern_name``'s)."""
        return self._named(self.pattern_name)

    def _named(self, name: str) -> Pattern:
        if name not in self._patterns:
            self._patterns[name] = PATTERNS.get(name)()
        return self._patterns[name]

    @property
    def wait_s(self) -> float:
        return self.channel.stats.wait_s

    def _allreduce(self, x: Array) -> Array:
        return self._reduce(x, PLAIN)  # Communicator.allreduce times it

    def allreduce_with(self, x: Array, codec: ChunkCodec) -> Array:
        """The pattern's allreduce of ``x`` (W > 1) with ``codec`` putting pieces on the wire (compression)."""
        with self.timed():
            return self._reduce(x, codec)

    def _reduce(self, x: Array, codec: ChunkCodec) -> Array:
        name = self._pattern_of(self.round)
        # A round after one of another pattern (a trial's turns), or after a restart, where the
        # last round's pattern is not known here: see ``Round.retire``.
        round_ = self._open_round(after_switch=name != self._last_pattern)
        self._last_pattern = name
        started = time.perf_counter()
        total = self._named(name).allreduce(round_, x, codec)
        if self.trial is not None:
            self.trial.observe(round_.number, x.nbytes, time.perf_counter() - started)
        return total

    def _pattern_of(self, number: int) -> str:
        """The name of the pattern round ``number`` runs: its turn in a trial, else the one the job keeps."""
        trial = self.trial
        if trial is not None and number < trial.end:
            return trial.pattern_at(number)
        if trial is not None:
            self._settle(trial)
        return self.pattern_name

    def conclude_trial(self) -> None:
        """Settle a trial every rank has finished (past its first round after), if not settled yet."""
        if self.trial is not None and self.round > self.trial.end:
            self._settle(self.trial)

    def _settle(self, trial: PatternTrial) -> None:
        """Store this rank's timings (unless a run of it before a restart did), read every rank's,
        and keep the pattern they agree is fastest."""
        mine = keys.trial_key(self.job_id, self.rank, self.attempt)
        if mine not in self.channel.get_many([mine]):
            self.channel.put(mine, trial.record())
        names = {rank: keys.trial_key(self.job_id, rank, self.attempt) for rank in range(self.world_size)}
        found = self.channel.wait_for(list(names.values()), self.timeout_s)
        chosen, self.trial_round_s = trial.decide({rank: found[key] for rank, key in names.items()})
        self.pattern_name = chosen
        self.trial = None
        timed = rounds_text(self.trial_round_s or {}, digits=2)
        log.info("pattern trial: keeping %s (%s)", chosen, timed or "a contender was not timed: the model's choice")

    def exchange(self, tag: str, neighbours: Sequence[int], value: bytes) -> dict[int, memoryview]:
        """One round of ``value`` to each of ``neighbours`` and theirs back, by rank: stored once
        under this rank's key, read at each neighbour's. Only neighbours read a rank's value: one
        that wrote round r has finished round r - 1, so the ranks h hops away have finished
        r - h, and every rank on a ring is past round r - W//2."""
        with self.collective() as round_:
            round_.put(round_.key(tag, rank=round_.rank), value)
            keys = {j: round_.key(tag, rank=j) for j in neighbours}
            raw = round_.wait_for(list(keys.values()))
            round_.retire(behind=round_.world_size // 2)
            return {j: raw[key] for j, key in keys.items()}

    @contextlib.contextmanager
    def collective(self) -> Iterator[Round]:
        """The round of one collective call beyond ``allreduce`` (the ring), timed as communication."""
        with self.timed():
            yield self._open_round()

    def _open_round(self, *, after_switch: bool = False) -> Round:
        round_ = self.round
        self.round += 1
        return Round(
            round_,
            self.rank,
            self.world_size,
            channel=self.channel,
            key=self.key,
            timeout_s=self.timeout_s,
            written=self._written.setdefault(round_, []),
            retire_through=self._retire_through,
            after_switch=after_switch,
        )

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the time inside as communication."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.comm_s += time.perf_counter() - started

    def _retire_through(self, round_: int) -> None:
        """Delete, off the critical path, the keys this rank wrote up to ``round_``, which every
        rank has moved past (the pattern's ``Round.retire`` knows when that is).

        With ``extra_retention`` the last few rounds stay readable, so a worker resumed
        from its checkpoint can replay them. Keys written before a restart are not
        remembered; rank 0 clears them with the rest of the job's keys at ``finish``.
        """
        round_ -= self.extra_retention
        done = [r for r in self._written if r <= round_]
        stored = [key for r in sorted(done) for key in self._written.pop(r)]
        if stored:
            self.in_background(self.channel.delete_stored, stored)

    def in_background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run housekeeping (deleting old keys) on one background thread; errors surface at finish."""
        self._cleanups = [f for f in self._cleanups if not f.done() or f.exception() is not None]
        self._cleanups.append(self._janitor.submit(fn, *args))

    def settle(self) -> None:
        """Wait for the housekeeping started so far; raise the first error it met."""
        for future in self._cleanups:
            future.result()

    def barrier(self, name: str) -> None:
        """Every rank posts a marker and waits for everyone's."""
        self._arrive(name, wait=True)

    def _arrive(self, name: str, *, wait: bool) -> None:
        with self.timed():
            self.channel.put(keys.barrier_key(self.job_id, name, self.rank, self.attempt), b"1")
            if wait:
                markers = [keys.barrier_key(self.job_id, name, r, self.attempt) for r in range(self.world_size)]
                self.channel.wait_for(markers, self.timeout_s)

    def finish(self, *, early: bool = False) -> None:
        """Rank 0 waits until every rank is done reading, then removes the job's keys.

        ``early``: this invocation stops for a continuation; only finish housekeeping.
        """
        if not early:
            self._arrive("end", wait=self.rank == 0)
        self.settle()
        self._janitor.shutdown(wait=True)
        if self.rank == 0 and not early:
            removed = self.channel.clear(keys.comm_prefix(self.job_id, self.attempt))
            log.debug("removed %d keys of job %s from the channel", removed, self.job_id)

    def stats(self) -> dict[str, float]:
        return self.channel.stats.snapshot()
