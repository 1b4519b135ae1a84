"""The Channel every backend subclasses: the rich layer over the core, and its bounded waits.

A backend implements the four primitives of ``core`` (``_put``, ``_get``, ``_list``,
``_delete``); ``values`` writes the rich layer on them once (chunking, batches, ranged and
packed reads, listing, deleting, accounting). Here: waiting for values other ranks write.
Every wait is one bounded poll loop (``Channel._wait``) that asks again only for what is
still missing, sleeping on a ``Backoff`` in between, and raises SyncTimeout at its deadline;
the public waits differ only in what one poll reads and how the values come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

from lambdaml import codec
from lambdaml.buffers import Placed, Target
from lambdaml.channels.values import ChannelValues, Range
from lambdaml.errors import SyncTimeout

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

W = TypeVar("W")
F = TypeVar("F")


@dataclass(frozen=True)
class Backoff:
    """Polling schedule for bounded waits: start small so a round is not floored by the poll."""

    initial_s: float = 0.0005
    factor: float = 1.5
    max_s: float = 0.025

    def delays(self) -> Iterable[float]:
        delay = self.initial_s
        while True:  # consumers stop at their own deadline
            yield delay
            delay = min(delay * self.factor, self.max_s)


@dataclass(frozen=True)
class Piece:
    """One value inside a packed value (``Channel.put_packed``): slot ``slot`` of the ``slots`` at
    ``packed``, known by its own ``key`` (the key it is sealed under on a sealed channel).

    ``lengths``: every slot's length, where the reader knows them (a fixed-size encoding): then
    one ranged read finds the piece; without them the packed value's index is read first.
    """

    packed: str
    key: str
    slot: int
    slots: int
    lengths: tuple[int, ...] | None = None


def _placed(value: bytes | Placed, target: Target) -> Placed | memoryview:
    """A value read whole, copied into its target where it has the target's length."""
    if isinstance(value, Placed):
        return value
    head, body = target
    view = memoryview(value).toreadonly()
    if len(view) != head + body.nbytes:
        return view
    body[:] = view[head:]
    return Placed(view[:head])


def _views(found: Mapping[str, bytes]) -> dict[str, memoryview]:
    return {k: memoryview(v).toreadonly() for k, v in found.items()}


class Channel(ChannelValues):
    """Key/value storage that workers synchronize through (S3, Redis, Memcached, DynamoDB, memory)."""

    #: A wait's first sleep between polls (``backoff``). Stores that bill per request keep
    #: ``Backoff``'s; an in-memory store, whose polls are free and take tens of microseconds,
    #: sleeps less, or the sleep would be most of a small round's wait.
    first_poll_s: ClassVar[float] = Backoff.initial_s

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> Channel:
        """Build the channel and its client from a job's channel spec."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a spec")

    def backoff(self) -> Backoff:
        """The poll schedule of this channel's waits."""
        return Backoff(initial_s=self.first_poll_s)

    # ---- the waits ------------------------------------------------------------------------

    def wait_for(
        self,
        keys: Sequence[str],
        timeout: float,
        *,
        backoff: Backoff | None = None,
        lengths: Mapping[str, int] | None = None,
    ) -> dict[str, bytes]:
        """Wait until every key exists and return their values; raises SyncTimeout.

        Polls only the keys still missing, with a backoff that starts small, so a round costs
        about what its transfers cost. ``lengths``: the length of each value the reader knows
        it, which a backend may read in fewer requests (Memcached: a chunked value's manifest
        and parts in one get); a value of another length still comes back as it is.
        """
        return self._wait(keys, self._sized_poll(lengths or {}), timeout, backoff, lambda k: k)

    def wait_for_views(
        self,
        keys: Sequence[str],
        timeout: float,
        *,
        backoff: Backoff | None = None,
        lengths: Mapping[str, int] | None = None,
    ) -> dict[str, memoryview]:
        """``wait_for``, the values as read-only views: a sealed channel opens them without copying them."""
        return _views(self.wait_for(keys, timeout, backoff=backoff, lengths=lengths))

    def wait_for_into(
        self, targets: Mapping[str, Target], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, Placed | memoryview]:
        """``wait_for``, each value past its target's head read into the target's body.

        A value of its target's length comes back ``Placed`` (its head; the rest is in the body):
        a chunked one's parts read straight into the body where the backend can, any other
        copied in once read. A value of another length is not what the target expects and comes
        back as it is (read-only), for its reader to refuse; its body is untouched, unless a poll
        found parts of it before its manifest (Memcached, a write in progress).
        """
        poll = self._into_poll(targets)

        def fetch(pending: list[str]) -> dict[str, Placed | memoryview]:
            found = poll(pending)
            return {key: _placed(value, targets[key]) for key, value in found.items()}

        return self._wait(list(targets), fetch, timeout, backoff, lambda k: k)

    def wait_for_packed(
        self, pieces: Sequence[Piece], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, bytes]:
        """The values of ``pieces`` by piece key, once their packed values exist; raises SyncTimeout.

        A piece whose slot lengths the reader knows costs one ranged read; any other, two (its
        packed value's fixed-size index, then the piece).
        """
        deadline = time.monotonic() + timeout
        where: dict[Piece, Range] = {}
        unknown = [p for p in pieces if p.lengths is None]
        if unknown:
            heads = {p: (p.packed, 0, codec.packed_index_bytes(p.slots)) for p in unknown}
            index = self._wait_for_ranges(list(heads.values()), timeout, backoff)
            for p, head in heads.items():
                start, stop = codec.decode_packed_index(index[head], p.slots, what=p.packed)[p.slot]
                where[p] = (p.packed, start, stop)
        for p in pieces:
            if p.lengths is not None:
                if len(p.lengths) != p.slots:
                    raise ValueError(f"{p.key}: {len(p.lengths)} lengths for {p.slots} slots")
                where[p] = (p.packed, *codec.packed_slots(p.lengths)[p.slot])
        # An empty piece is read as the packed value's first byte: there is no empty ranged read.
        reads = {p: r if r[2] > r[1] else (p.packed, 0, 1) for p, r in where.items()}
        found = self._wait_for_ranges(list(reads.values()), max(deadline - time.monotonic(), 0.0), backoff)
        return {p.key: found[reads[p]] if where[p][2] > where[p][1] else b"" for p in pieces}

    def wait_for_packed_views(
        self, pieces: Sequence[Piece], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, memoryview]:
        """``wait_for_packed``, the values as read-only views (as ``wait_for_views``)."""
        return _views(self.wait_for_packed(pieces, timeout, backoff=backoff))

    def _wait_for_ranges(self, ranges: Sequence[Range], timeout: float, backoff: Backoff | None) -> dict[Range, bytes]:
        """``wait_for`` of ranged reads: until every range's value exists; raises SyncTimeout."""
        return self._wait(ranges, self.get_ranges, timeout, backoff, lambda r: r[0])

    # ---- what one poll reads: backends that read in fewer requests override these ----------

    def _sized_poll(self, lengths: Mapping[str, int]) -> Callable[[list[str]], Mapping[str, bytes]]:
        """``wait_for``'s poll, once for a wait, given the values' lengths where known: here
        ``get_many``, which needs none."""
        return self.get_many

    def _into_poll(self, targets: Mapping[str, Target]) -> Callable[[list[str]], Mapping[str, bytes | Placed]]:
        """``wait_for_into``'s poll, made once for a wait: here ``get_many`` (the rich layer copies
        each value into its target). A backend that reads into buffers of its choosing reads a
        value of its target's length straight into it (``Placed``)."""
        return self.get_many

    # ---- the one bounded poll loop ------------------------------------------------------------

    def _wait(
        self,
        wanted: Sequence[W],
        fetch: Callable[[list[W]], Mapping[W, F]],
        timeout: float,
        backoff: Backoff | None,
        name: Callable[[W], str],
    ) -> dict[W, F]:
        """Poll ``fetch`` for the items still missing (each asked for once) until all are found,
        within ``timeout``; raises SyncTimeout naming the first one missing."""
        pending = list(dict.fromkeys(wanted))
        count = len(pending)
        found: dict[W, F] = {}
        started = time.monotonic()
        deadline = started + timeout
        delays = iter((backoff or self.backoff()).delays())
        while True:
            poll_started = time.monotonic()
            found.update(fetch(pending))
            pending = [k for k in pending if k not in found]
            if not pending:
                # Everything before the poll that completed the set was spent waiting on others.
                self.stats.add(wait_s=poll_started - started)
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stats.add(wait_s=time.monotonic() - started)
                raise SyncTimeout(
                    f"timed out after {timeout:g}s on the {self.describe()} channel waiting for "
                    f"{len(pending)} of {count} keys (first: {name(pending[0])})"
                )
            time.sleep(min(next(delays), remaining))
