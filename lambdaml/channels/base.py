"""The Channel: a small abstract storage core with a rich layer written once on top.

A backend implements ``_put``, ``_get``, ``_list`` and ``_delete`` (plus, where it has
them, batch reads and writes and ranged reads). Everything else lives here, once: chunking of
values over the backend's item limit, paginated listing without chunk parts, concurrent
multi-gets, ranged reads and packed values, bounded waits with backoff, retries of transient
failures, prefix clearing, and request/byte accounting.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, TypeVar

from lambdaml import buffers, codec
from lambdaml import keys as K
from lambdaml.buffers import Placed, Target, Value
from lambdaml.channels.chunks import WRITE_ID, Manifest, join_parts, manifest_of, split_value
from lambdaml.errors import ChannelError, ChannelUnreachable, KeyNotFound, SyncTimeout, TransientChannelError

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

log = logging.getLogger(__name__)
R = TypeVar("R")
T = TypeVar("T")
W = TypeVar("W")
J = TypeVar("J")
F = TypeVar("F")

#: ``(key, start, stop)``: bytes ``start`` to ``stop`` (exclusive) of the value at ``key``.
Range = tuple[str, int, int]

_DELETE_BATCH = 1000


def _common_prefix(strings: Sequence[str]) -> str:
    lo, hi = min(strings), max(strings)
    size = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a != b), min(len(lo), len(hi)))
    return lo[:size]


def _slice(channel: Channel, key: str, value: bytes, start: int, stop: int) -> bytes:
    if stop > len(value):
        raise ChannelError(f"{channel.kind}: range {start}:{stop} of {key} runs past the end of its {len(value)} bytes")
    return value[start:stop]


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


@dataclass
class ChannelStats:
    """Requests and bytes this process moved through a channel (for cost and benchmarks)."""

    puts: int = 0
    gets: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    wait_s: float = 0.0  # time in wait_for before the poll that found the last key: waiting on others
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    @property
    def requests(self) -> int:
        return self.puts + self.gets + self.lists + self.deletes

    def as_dict(self) -> dict[str, int]:
        return {
            "puts": self.puts,
            "gets": self.gets,
            "lists": self.lists,
            "deletes": self.deletes,
            "requests": self.requests,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }

    def snapshot(self) -> dict[str, float]:
        return {**self.as_dict(), "wait_s": self.wait_s}


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


class Channel(ABC):
    """Key/value storage that workers synchronize through (S3, Redis, Memcached, DynamoDB, memory)."""

    kind: ClassVar[str] = "abstract"
    #: Largest value the backend stores in one item; larger values are chunked. None: no limit.
    max_item_bytes: int | None = None
    #: How many times a transient failure (throttling, truncated body) is retried.
    transient_retries: int = 4
    #: How long an endpoint may stay unreachable mid-job (a restarting server) before the call fails.
    reconnect_s: float = 5.0
    #: Concurrent requests per channel for multi-key operations.
    concurrency: int = 32
    #: Values one write request may carry (pipelined SETs, a multi-set) and their total size;
    #: 1: every value is its own request. Batches still go out concurrently.
    put_batch: int = 1
    put_batch_bytes: int = 1 << 20
    #: Whether the backend stores one write request's values in the order they were sent (Memcached's
    #: commands pipelined on one connection). A chunked value's parts then go in one request with its
    #: manifest last, and a reader that finds the manifest still finds every part; otherwise the
    #: manifests go once every part's request has returned, a round trip later.
    ordered_writes: ClassVar[bool] = False
    #: Whether the backend reads part of a value in one request (``_get_range``: S3's HTTP Range).
    #: Without it a ranged read fetches the whole value and slices it: correct, never cheaper.
    ranged_reads: ClassVar[bool] = False
    #: A wait's first sleep between polls (``backoff``). Stores that bill per request keep
    #: ``Backoff``'s; an in-memory store sleeps less, its polls being free and tens of microseconds:
    #: at 0.5 ms, the sleep was most of a small round's wait on a loopback Redis or Memcached
    #: (at W = 2, d = 1e4 AllReduce read 1.14-1.35x its raw round on Redis and 1.09-2.19x on
    #: Memcached, 0.93-1.09x at 0.1 ms).
    first_poll_s: ClassVar[float] = Backoff.initial_s

    def __init__(self) -> None:
        self.stats = ChannelStats()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> Channel:
        """Build the channel and its client from a job's channel spec."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a spec")

    # ---- the abstract core --------------------------------------------------------

    @abstractmethod
    def _put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _get(self, key: str) -> bytes:
        """Return the stored bytes or raise KeyNotFound."""

    @abstractmethod
    def _list(self, prefix: str) -> Iterable[str]:
        """Every stored key starting with ``prefix``, chunk parts included, all pages."""

    @abstractmethod
    def _delete(self, keys: Sequence[str]) -> None:
        """Delete the keys (at most 1,000 per call); missing keys are not an error."""

    def _get_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``start:stop`` (0 <= start < stop) of the stored value in one request, or raise KeyNotFound,
        or a ChannelError naming the value's size if the range runs past its end. Only backends
        with ``ranged_reads`` implement it."""
        raise ChannelError(f"the {self.kind} channel has no ranged reads")

    def _put_new(self, key: str, data: bytes) -> bool:
        """Store ``data`` only if ``key`` is absent, atomically; False if it exists. For claims (job ids)."""
        raise ChannelError(f"the {self.kind} channel has no conditional writes")

    def _put_batch(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Several values in one round trip: backends with batched writes (``put_batch`` > 1) override this."""
        for key, data in items:
            self._put(key, data)

    def _write(self, batch: Sequence[tuple[str, Value]]) -> None:
        """One write request of ``put_many``'s: each value joined into bytes here, where it is sent.
        A backend that sends a list of buffers as it is overrides this and joins nothing."""
        items = [(key, buffers.joined(value)) for key, value in batch]
        if len(items) == 1:
            self._put(*items[0])
        else:
            self._put_batch(items)

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """Backends with batch reads override this; the default issues the GETs concurrently."""

        def one(key: str) -> tuple[str, bytes | None]:
            try:
                return key, self._retry(self._get, key)
            except KeyNotFound:
                return key, None

        return {k: v for k, v in self._map(one, keys) if v is not None}

    def ensure(self) -> None:
        """Create the bucket/table if missing (local stacks and tests; on AWS the template does)."""

    def ping(self) -> None:
        """Raise ChannelUnavailable if the endpoint cannot be reached."""
        with contextlib.suppress(KeyNotFound):
            self._get(K.comm_prefix("ping") + "probe")

    def refuses_anonymous_clients(self) -> bool:
        """Whether the server turns away a client that does not authenticate.

        Only then does a channel's own authentication keep a forger out: a server with no
        password set accepts any AUTH, so ``integrity: auto`` keeps the values' MAC unless this
        holds (``lambdaml.runtime.start.job_secret``). Channels without a login of their own: False.
        """
        return False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def describe(self) -> str:
        return self.kind

    # ---- helpers ---------------------------------------------------------------------

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"{self.kind}-channel")
        return list(self._pool.map(fn, items))

    def _retry(self, fn: Callable[..., R], *args: object) -> R:
        """Retry transient errors a few times, and an unreachable endpoint for up to
        ``reconnect_s`` (a restarting server), with exponential backoff from 10 ms."""
        delay = 0.01
        attempt = 0
        outage_ends: float | None = None
        while True:
            try:
                return fn(*args)
            except TransientChannelError as exc:
                if attempt == self.transient_retries:
                    raise ChannelError(f"{self.kind}: gave up after {attempt + 1} tries: {exc}") from None
                attempt += 1
                log.debug("transient %s error, retrying in %.3fs: %s", self.kind, delay, exc)
            except ChannelUnreachable as exc:
                now = time.monotonic()
                outage_ends = outage_ends or now + self.reconnect_s
                if now >= outage_ends:
                    raise
                log.info("%s unreachable, retrying in %.3fs: %s", self.kind, delay, exc)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ---- the rich layer --------------------------------------------------------------

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
                    out[(key, start, stop)] = _slice(self, key, values[key], start, stop)
            return out

        def one(wanted_range: Range) -> tuple[Range, bytes | None]:
            try:
                return wanted_range, self._retry(self._get_range, *wanted_range)
            except KeyNotFound:
                return wanted_range, None

        found = {r: v for r, v in self._map(one, wanted) if v is not None}
        self.stats.add(gets=len(wanted), bytes_received=sum(len(v) for v in found.values()))
        return found

    def wait_for_ranges(
        self, ranges: Sequence[Range], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[Range, bytes]:
        """``wait_for`` of ranged reads: until every range's value exists; raises SyncTimeout."""
        return self._wait(list(dict.fromkeys(ranges)), self.get_ranges, timeout, backoff, lambda r: r[0])

    def put_packed(self, key: str, pieces: Sequence[tuple[str, Value]]) -> list[str]:
        """Store several values as one value at ``key`` (one write instead of one each), every one
        readable on its own by ``wait_for_packed``; returns the keys stored, as ``put`` does.

        The piece keys name the values (a sealed channel binds each to its own); slot i holds
        ``pieces[i]``.
        """
        return self.put(key, codec.encode_packed([buffers.joined(data) for _, data in pieces]))

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
            index = self.wait_for_ranges(list(heads.values()), timeout, backoff=backoff)
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
        found = self.wait_for_ranges(list(reads.values()), max(deadline - time.monotonic(), 0.0), backoff=backoff)
        return {p.key: found[reads[p]] if where[p][2] > where[p][1] else b"" for p in pieces}

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

    def _into_poll(self, targets: Mapping[str, Target]) -> Callable[[list[str]], Mapping[str, bytes | Placed]]:
        """``wait_for_into``'s poll, made once for a wait: here ``get_many`` (the rich layer copies
        each value into its target). A backend that reads into buffers of its choosing reads a
        value of its target's length straight into it (``Placed``)."""
        return self.get_many

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
        return self._wait(list(dict.fromkeys(keys)), self._sized_poll(lengths or {}), timeout, backoff, lambda k: k)

    def _sized_poll(self, lengths: Mapping[str, int]) -> Callable[[list[str]], Mapping[str, bytes]]:
        """``wait_for``'s poll, once for a wait, given the values' lengths where known: here
        ``get_many``, which needs none."""
        return self.get_many

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

        return self._wait(list(dict.fromkeys(targets)), fetch, timeout, backoff, lambda k: k)

    def wait_for_views(
        self,
        keys: Sequence[str],
        timeout: float,
        *,
        backoff: Backoff | None = None,
        lengths: Mapping[str, int] | None = None,
    ) -> dict[str, memoryview]:
        """``wait_for``, the values as read-only views: a sealed channel opens them without copying them."""
        found = self.wait_for(keys, timeout, backoff=backoff, lengths=lengths)
        return {k: memoryview(v).toreadonly() for k, v in found.items()}

    def wait_for_packed_views(
        self, pieces: Sequence[Piece], timeout: float, *, backoff: Backoff | None = None
    ) -> dict[str, memoryview]:
        """``wait_for_packed``, the values as read-only views (as ``wait_for_views``)."""
        found = self.wait_for_packed(pieces, timeout, backoff=backoff)
        return {k: memoryview(v).toreadonly() for k, v in found.items()}

    def _wait(
        self,
        pending: list[W],
        fetch: Callable[[list[W]], Mapping[W, F]],
        timeout: float,
        backoff: Backoff | None,
        name: Callable[[W], str],
    ) -> dict[W, F]:
        """Poll ``fetch`` for the items still missing until all are found, within ``timeout``."""
        wanted = len(pending)
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
                    f"{len(pending)} of {wanted} keys (first: {name(pending[0])})"
                )
            time.sleep(min(next(delays), remaining))

    def backoff(self) -> Backoff:
        """The poll schedule of this channel's waits."""
        return Backoff(initial_s=self.first_poll_s)

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

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
