"""A channel's rich layer, written once over its core: values by logical key.

Values over the backend's item limit are chunked and joined again; writes go out in batches,
concurrently; reads of several keys are one call; ranged reads are native where the backend
has them and slices of whole reads where not; several values can be packed into one; listing
leaves chunk parts out and deleting takes them along. Requests and bytes are counted here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from lambdaml import buffers, codec
from lambdaml import keys as K
from lambdaml.buffers import Value
from lambdaml.channels.chunks import WRITE_ID, Manifest, join_parts, manifest_of, split_value
from lambdaml.channels.core import ChannelCore
from lambdaml.errors import ChannelError, KeyNotFound

J = TypeVar("J")

#: ``(key, start, stop)``: bytes ``start`` to ``stop`` (exclusive) of the value at ``key``.
Range = tuple[str, int, int]

_DELETE_BATCH = 1000


def _common_prefix(strings: Sequence[str]) -> str:
    lo, hi = min(strings), max(strings)
    size = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a != b), min(len(lo), len(hi)))
    return lo[:size]


def _slice(kind: str, key: str, value: bytes, start: int, stop: int) -> bytes:
    if stop > len(value):
        raise ChannelError(f"{kind}: range {start}:{stop} of {key} runs past the end of its {len(value)} bytes")
    return value[start:stop]


class ChannelValues(ChannelCore):
    """Puts, gets, ranged reads, listing and deleting of whole values, over the four primitives."""

    # ---- writes -------------------------------------------------------------------------

    def put(self, key: str, data: Value) -> list[str]:
        """Store ``data`` at ``key``; values over the item limit are chunked transparently.

        Returns the keys stored (``key``, or its parts and manifest), for ``delete_stored``.
        """
        return self.put_many([(key, data)])

    def put_many(self, items: Sequence[tuple[str, Value]]) -> list[str]:
        """Store several values concurrently (a ScatterReduce worker's W-1 pieces); returns the keys stored.

        Values over the item limit are split first, so every part of every value goes out
        in one concurrent batch and the manifests follow in a second: a reader that sees a
        key sees all its parts, and no pool task ever waits on the pool it runs in. Where the
        backend keeps a request's order (``ordered_writes``), each chunked value is one request
        of its parts and then its manifest, and there is no second batch.
        """
        limit = self.max_item_bytes
        first: list[tuple[str, Value]] = []  # whole values and chunk parts
        manifests: list[tuple[str, Value]] = []
        chunked: list[list[tuple[str, Value]]] = []  # a value's parts, then its manifest
        sent = 0
        for key, value in items:
            data = value if isinstance(value, (bytes, tuple)) else bytes(value)  # a caller's bytearray, say
            length = buffers.size(data)
            if limit is None or length <= limit:
                first.append((key, data))
                sent += length
                continue
            parts, manifest = split_value(key, data, limit)
            if self.ordered_writes:
                chunked.append([*parts, manifest])
            else:
                first.extend(parts)
                manifests.append(manifest)
            sent += length + len(manifest[1])

        def put_batch(batch: Sequence[tuple[str, Value]]) -> None:
            self._retry(self._write, batch)  # a write is idempotent: a retried batch rewrites the same bytes

        batches = self._put_batches(first) + chunked
        self._map(put_batch, batches)
        self._map(put_batch, self._put_batches(manifests))
        stored = [key for batch in batches for key, _ in batch] + [key for key, _ in manifests]
        self.stats.add(puts=len(stored), bytes_sent=sent)
        return stored

    def put_new(self, key: str, data: bytes) -> bool:
        """Create ``key`` unless it exists (one conditional write, never chunked); True if this call created it.

        Of several concurrent callers exactly one gets True: how a job id is claimed once.
        """
        if self.max_item_bytes is not None and len(data) > self.max_item_bytes:
            raise ChannelError(f"{self.kind}: a conditional write of {len(data)} bytes is over the item limit")
        created = self._retry(self._put_new, key, bytes(data))
        self.stats.add(puts=1, bytes_sent=len(data))
        return created

    def put_packed(self, key: str, pieces: Sequence[tuple[str, Value]]) -> list[str]:
        """Store several values as one value at ``key`` (one write instead of one each), every one
        readable on its own by ``wait_for_packed``; returns the keys stored, as ``put`` does.

        The piece keys name the values (a sealed channel binds each to its own); slot i holds
        ``pieces[i]``.
        """
        return self.put(key, codec.encode_packed([buffers.joined(data) for _, data in pieces]))

    def _put_batches(self, items: Sequence[tuple[str, Value]]) -> list[list[tuple[str, Value]]]:
        """Consecutive values grouped up to ``put_batch`` values and ``put_batch_bytes`` bytes (one at least)."""
        batches: list[list[tuple[str, Value]]] = []
        size = 0
        for key, value in items:
            length = buffers.size(value)
            if not batches or len(batches[-1]) >= self.put_batch or size + length > self.put_batch_bytes:
                batches.append([])
                size = 0
            batches[-1].append((key, value))
            size += length
        return batches

    # ---- reads --------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """Return the value at ``key``; raises KeyNotFound."""
        raw = self._retry(self._get, key)
        self.stats.add(gets=1, bytes_received=len(raw))
        return self._assemble({key: raw})[key]

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """Fetch several keys concurrently (or in one batch); missing keys are left out."""
        return self._assemble(self._fetch(keys))

    def _fetch(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The items of ``keys`` that exist, as stored (a chunked value's manifest, not its parts)."""
        if not keys:
            return {}
        found = self._retry(self._get_many, list(keys))
        self.stats.add(gets=len(keys), bytes_received=sum(len(v) for v in found.values()))
        return found

    def _assemble(self, found: dict[str, bytes]) -> dict[str, bytes]:
        """The values ``found`` holds, chunked ones joined from their parts."""
        return self._with_parts(found, self._join_chunked)

    def _with_parts(
        self, found: dict[str, bytes], join: Callable[[Sequence[Manifest]], Mapping[str, J]]
    ) -> dict[str, bytes | J]:
        """``found``, each manifest replaced by what ``join`` makes of its parts.

        The parts of every chunked value are fetched in one call, so W-1 chunked pieces cost
        one more round trip, not W-1 of them one after another.
        """
        manifests = [m for k, raw in found.items() if (m := manifest_of(k, raw, self.kind)) is not None]
        if not manifests:
            return dict(found)
        joined = self._retry(join, manifests)
        self.stats.add(
            gets=sum(m.parts for m in manifests), bytes_received=sum(m.total + m.parts * WRITE_ID for m in manifests)
        )
        return {key: joined.get(key, raw) for key, raw in found.items()}

    def _join_chunked(self, manifests: Sequence[Manifest]) -> dict[str, bytes]:
        """The values the manifests name, each joined from its parts (all parts fetched in one call);
        refused if a part is missing or of another write. A backend that reads values into buffers
        of its choosing overrides this to read the parts into one buffer each, unjoined."""
        part_keys = [part for manifest in manifests for part in manifest.part_keys]
        parts = self._get_many(part_keys)
        return {m.key: join_parts(m, {k: parts[k] for k in m.part_keys if k in parts}, self.kind) for m in manifests}

    # ---- ranged reads ---------------------------------------------------------------------

    @property
    def native_ranges(self) -> bool:
        """Whether a ranged read is one request for just its bytes (never so where values may be chunked)."""
        return self.ranged_reads and self.max_item_bytes is None

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``start:stop`` of the value at ``key``; raises KeyNotFound, or ChannelError past its end."""
        found = self.get_ranges([(key, start, stop)])
        if (key, start, stop) not in found:
            raise KeyNotFound(f"{self.describe()}: {key} not found")
        return found[(key, start, stop)]

    def get_ranges(self, ranges: Sequence[Range]) -> dict[Range, bytes]:
        """Several ranged reads concurrently; ranges of missing keys are left out.

        Natively one request per range; otherwise one read of each value, sliced (the same
        bytes, and the same errors, either way).
        """
        wanted = list(dict.fromkeys(ranges))
        for key, start, stop in wanted:
            if not 0 <= start < stop:
                raise ValueError(f"invalid range {start}:{stop} of {key}: need 0 <= start < stop")
        if not wanted:
            return {}
        if not self.native_ranges:
            values = self.get_many(list(dict.fromkeys(key for key, _, _ in wanted)))
            out: dict[Range, bytes] = {}
            for key, start, stop in wanted:
                if key in values:
                    out[(key, start, stop)] = _slice(self.kind, key, values[key], start, stop)
            return out

        def one(wanted_range: Range) -> tuple[Range, bytes | None]:
            try:
                return wanted_range, self._retry(self._get_range, *wanted_range)
            except KeyNotFound:
                return wanted_range, None

        found = {r: v for r, v in self._map(one, wanted) if v is not None}
        self.stats.add(gets=len(wanted), bytes_received=sum(len(v) for v in found.values()))
        return found

    # ---- listing and deleting ---------------------------------------------------------------

    def list(self, prefix: str = "") -> list[str]:
        """Every logical key under ``prefix``, sorted, across all pages."""
        self.stats.add(lists=1)
        return sorted(k for k in self._list_raw(prefix) if not K.is_chunk_part(k))

    def _list_raw(self, prefix: str) -> Sequence[str]:
        """Every raw key under ``prefix`` (parts included), retrying transient failures."""
        return self._retry(lambda: [*self._list(prefix)])

    def delete(self, keys: Sequence[str]) -> None:
        """Delete keys and their chunk parts; missing keys are ignored."""
        targets = list(keys)
        if self.max_item_bytes is not None and targets:
            # One listing for the whole batch: on DynamoDB a listing is a full-table Scan and on
            # Memcached a walk of every item, so one per key would make deletes quadratic.
            wanted = set(targets)
            prefix = K.chunk_parts_prefix(targets[0]) if len(wanted) == 1 else _common_prefix(targets)
            for raw in self._list_raw(prefix):
                if K.is_chunk_part(raw) and raw.rpartition(K.CHUNK_MARK)[0] in wanted:
                    targets.append(raw)
        self._delete_raw(targets)

    def clear(self, prefix: str) -> int:
        """Delete everything under ``prefix`` (a job's or a round's keys); returns the count."""
        targets = self._list_raw(prefix)
        self.stats.add(lists=1)
        self._delete_raw(targets)
        return len(targets)

    def delete_stored(self, stored: Sequence[str]) -> None:
        """Delete exactly the keys ``put``/``put_many`` returned: no listing, so it costs one
        batch delete where ``delete`` or ``clear`` would walk a Memcached server or scan a table."""
        self._delete_raw(list(stored))

    def _delete_raw(self, keys: Sequence[str]) -> None:
        batches = [list(keys[i : i + _DELETE_BATCH]) for i in range(0, len(keys), _DELETE_BATCH)]
        for batch in batches:
            self._retry(self._delete, batch)
        self.stats.add(deletes=len(batches))
