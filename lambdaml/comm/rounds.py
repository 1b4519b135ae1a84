"""The round context: the one view of the channel a collective pattern or the ring works through.

The channel communicator opens a ``Round`` for every collective call, so the pattern
never sees the communicator or its channel: it builds the round's keys, puts and waits
for values, and says when the ranks are past an earlier round. Values go through the
communicator's sealed channel, so every value stays bound to its key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from lambdaml.buffers import Placed, Target, Value
from lambdaml.channels import Channel
from lambdaml.channels.base import Piece


class KeyBuilder(Protocol):
    """The communicator's key of a round's value: its job, attempt and round, then tag, rank, chunk."""

    def __call__(self, round_: int, tag: str, *, rank: int | None, chunk: int | None = None) -> str: ...


class Round:
    """One collective call's round: its number, its keys, its writes and its waits.

    Every key it builds lives under the job's attempt and this round's number, and is
    written once. The keys this rank stores are recorded (``written``) so that
    ``retire`` can have the communicator delete them once no rank reads them again.
    """

    def __init__(
        self,
        number: int,
        rank: int,
        world_size: int,
        *,
        channel: Channel,
        key: KeyBuilder,
        timeout_s: float,
        written: list[str],
        retire_through: Callable[[int], None],
        after_switch: bool = False,
    ) -> None:
        self.number = number
        self.rank = rank
        self.world_size = world_size
        self._channel = channel
        self._key = key
        self._timeout_s = timeout_s
        self._written = written
        self._retire_through = retire_through
        self._after_switch = after_switch

    def key(self, tag: str, *, rank: int | None, chunk: int | None = None) -> str:
        """This round's key of ``rank``'s value (``None``: the merged one), of one chunk if given."""
        return self._key(self.number, tag, rank=rank, chunk=chunk)

    def put(self, key: str, data: Value) -> None:
        self.put_many([(key, data)])

    def put_many(self, items: Sequence[tuple[str, Value]]) -> None:
        """Store values concurrently, each sealed under its key, and remember them for retirement."""
        self._written.extend(self._channel.put_many(items))

    @property
    def packs(self) -> bool:
        """Whether one rank's values for several readers go out as one packed value, each reader
        ranged-reading its own: on a channel with native ranged reads, where writes cost most (S3)."""
        return self._channel.native_ranges

    def put_packed(self, key: str, pieces: Sequence[tuple[str, Value]]) -> None:
        """Store the pieces as one value at ``key``, each sealed under its own key, and remember it."""
        self._written.extend(self._channel.put_packed(key, pieces))

    def wait_for_packed(self, pieces: Sequence[Piece]) -> dict[str, memoryview]:
        """The pieces by their keys, once their packed values exist (bounded, opened and checked)."""
        return self._channel.wait_for_packed_views(pieces, self._timeout_s)

    def wait_for(self, keys: Sequence[str], lengths: Mapping[str, int] | None = None) -> dict[str, memoryview]:
        """The values of ``keys``, once all exist (bounded by the job's timeout; opened and checked).

        Read-only views, not copies: a pattern only decodes what it reads. ``lengths``: each
        value's wire length where the encoding fixes it, which spares a chunked value's manifest
        read where the channel can (``Channel.wait_for``)."""
        return self._channel.wait_for_views(keys, self._timeout_s, lengths=lengths)

    def wait_for_into(self, targets: Mapping[str, Target]) -> dict[str, Placed | memoryview]:
        """``wait_for``, each value's bytes past its target's head read into the target's body
        (``Placed``: its head; the body holds the rest, checked), or the value as it is where its
        length is not the target's."""
        return self._channel.wait_for_into(targets, self._timeout_s)

    def retire(self, behind: int = 1) -> None:
        """Every rank is past round ``number - behind``: what this rank wrote up to it may go.

        Only the pattern knows when that is (what this rank has read proves how far the
        others got); the deletion runs off the critical path. A pattern's proof covers the
        readers its own rounds have: 2-D ScatterReduce hears only from its row and column,
        who alone read its values, where an AllReduce or ScatterReduce value is read by every
        rank. So a round that follows one of another pattern (``after_switch``: a pattern
        trial's turns) retires one round later. Hearing from anyone in it proves every rank
        finished the round before the last: each rank's last round read every rank's values.
        """
        self._retire_through(self.number - behind - int(self._after_switch))
