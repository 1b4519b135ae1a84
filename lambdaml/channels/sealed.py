"""A channel whose every value is sealed under its key (``lambdaml.seal``).

The communicator wraps the job's channel in one, so every collective, ring exchange,
ASP update and barrier marker is bound to its key without any of them knowing: a value
read from the wrong place fails to open instead of training on. Chunking, retries and
accounting stay the wrapped channel's; the stats are the wrapped channel's own object.

A packed value is not sealed as a whole (a ranged read could not check a seal over all of
it): each of its pieces is sealed under its own piece key, so every reader opens and checks
exactly the piece it reads.

A value that fails to open is read once more before the failure stands: a store can hand one
reader a damaged body (moto's S3 does under concurrent requests to a fresh key, and without
botocore's body checksums nothing below us notices). A value that is really wrong (replayed,
from another job, tampered with) reads the same again and fails loudly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from lambdaml.buffers import Placed, Target, Value, joined
from lambdaml.channels.base import Backoff, Channel, Piece
from lambdaml.channels.values import Range
from lambdaml.errors import CodecError
from lambdaml.seal import OVERHEAD, Sealer

log = logging.getLogger(__name__)
V = TypeVar("V")
F = TypeVar("F")


class SealedChannel(Channel):
    """Seals on the way in, opens on the way out; everything else is the wrapped channel's."""

    def __init__(self, inner: Channel, sealer: Sealer) -> None:
        super().__init__()
        self.inner = inner
        self.sealer = sealer
        self.kind = inner.kind  # type: ignore[misc]  # an instance mirrors the wrapped channel's kind
        self.stats = inner.stats
        self.max_item_bytes = inner.max_item_bytes
        self.ranged_reads = inner.ranged_reads  # type: ignore[misc]  # as ``kind``
        self.first_poll_s = inner.first_poll_s  # type: ignore[misc]  # as ``kind``

    @property
    def native_ranges(self) -> bool:
        return self.inner.native_ranges

    def describe(self) -> str:
        return self.inner.describe()

    # Raw operations go to the wrapped channel (listing, deleting, clearing stay as they are).
    def _put(self, key: str, data: bytes) -> None:
        self.inner._put(key, data)

    def _get(self, key: str) -> bytes:
        return self.inner._get(key)

    def _list(self, prefix: str) -> Iterable[str]:
        return self.inner._list(prefix)

    def _delete(self, keys: Sequence[str]) -> None:
        self.inner._delete(keys)

    def _get_range(self, key: str, start: int, stop: int) -> bytes:
        return self.inner._get_range(key, start, stop)

    def _list_raw(self, prefix: str) -> Sequence[str]:
        return self.inner._list_raw(prefix)

    def _delete_raw(self, keys: Sequence[str]) -> None:
        self.inner._delete_raw(keys)

    # Values are sealed and opened around the wrapped channel's rich layer (chunking included).
    def put_many(self, items: Sequence[tuple[str, Value]]) -> list[str]:
        return self.inner.put_many([(key, self.sealer.seal_buffers(key, data)) for key, data in items])

    def get(self, key: str) -> bytes:
        return self._open({key: self.inner.get(key)}, self.inner.get, self.sealer.open)[key]

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        return self._open(self.inner.get_many(keys), self.inner.get, self.sealer.open)

    def wait_for(
        self,
        keys: Sequence[str],
        timeout: float,
        *,
        backoff: Backoff | None = None,
        lengths: Mapping[str, int] | None = None,
    ) -> dict[str, bytes]:
        found = self.inner.wait_for(keys, timeout, backoff=backoff, lengths=self._sealed_sizes(lengths))
        return self._open(found, self.inner.get, self.sealer.open)

    def wait_for_views(
        self,
        keys: Sequence[str],
        timeout: float,
        *,
        backoff: Backoff | None = None,
        lengths: Mapping[str, int] | None = None,
    ) -> dict[str, memoryview]:
        found = self.inner.wait_for(keys, timeout, backoff=backoff, lengths=self._sealed_sizes(lengths))
        return self._open(found, self.inner.get, self.sealer.open_view)

    def wait_for_into(
        self, targets: Mapping[str, Target], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, Placed | memoryview]:
        """``wait_for_into``, each value opened: a Placed one's seal checked over its head and body."""
        sealed = {key: (OVERHEAD + head, body) for key, (head, body) in targets.items()}

        def reread(key: str) -> Placed | memoryview:
            return self.inner.wait_for_into({key: sealed[key]}, timeout)[key]

        def opener(key: str, value: Placed | memoryview) -> Placed | memoryview:
            if isinstance(value, Placed):
                return Placed(self.sealer.open_placed(key, value.head, targets[key][1]))
            return self.sealer.open_view(key, value)

        return self._open(self.inner.wait_for_into(sealed, timeout, backoff=backoff), reread, opener)

    # Ranges are raw bytes (part of a sealed value is no value to open); packed pieces are opened.
    def get_ranges(self, ranges: Sequence[Range]) -> dict[Range, bytes]:
        return self.inner.get_ranges(ranges)

    def put_packed(self, key: str, pieces: Sequence[tuple[str, Value]]) -> list[str]:
        return self.inner.put_packed(key, [(name, self.sealer.seal(name, joined(data))) for name, data in pieces])

    def wait_for_packed(
        self, pieces: Sequence[Piece], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, bytes]:
        return self._open_packed(pieces, timeout, backoff, self.sealer.open)

    def wait_for_packed_views(
        self, pieces: Sequence[Piece], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, memoryview]:
        return self._open_packed(pieces, timeout, backoff, self.sealer.open_view)

    def _open_packed(
        self,
        pieces: Sequence[Piece],
        timeout: float,
        backoff: Backoff | None,
        opener: Callable[[str, bytes], V],
    ) -> dict[str, V]:
        sealed = {p.key: p for p in self._sealed_lengths(pieces)}

        def reread(key: str) -> bytes:  # the piece is there by now: one read of its range
            return self.inner.wait_for_packed([sealed[key]], timeout)[key]

        return self._open(self.inner.wait_for_packed(list(sealed.values()), timeout, backoff=backoff), reread, opener)

    def _open(self, found: Mapping[str, F], reread: Callable[[str], F], opener: Callable[[str, F], V]) -> dict[str, V]:
        """Every value opened; one that fails is read once more, and a second failure stands."""
        opened: dict[str, V] = {}
        for key, raw in found.items():
            try:
                opened[key] = opener(key, raw)
            except CodecError as exc:
                log.warning("%s on the %s channel: %s; reading it again", key, self.describe(), exc)
                opened[key] = opener(key, reread(key))
        return opened

    @staticmethod
    def _sealed_sizes(lengths: Mapping[str, int] | None) -> dict[str, int] | None:
        """Values' lengths as sealed on the wire."""
        return None if lengths is None else {key: n + OVERHEAD for key, n in lengths.items()}

    @staticmethod
    def _sealed_lengths(pieces: Sequence[Piece]) -> list[Piece]:
        """The pieces with the lengths their sealed values have on the wire."""
        return [p if p.lengths is None else replace(p, lengths=tuple(n + OVERHEAD for n in p.lengths)) for p in pieces]

    def delete(self, keys: Sequence[str]) -> None:
        self.inner.delete(keys)

    def clear(self, prefix: str) -> int:
        return self.inner.clear(prefix)

    def ensure(self) -> None:
        self.inner.ensure()

    def ping(self) -> None:
        self.inner.ping()

    def close(self) -> None:
        super().close()
        self.inner.close()
