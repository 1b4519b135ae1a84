"""The Memcached channel (ElastiCache for Memcached): fast, with batch reads and writes.

Memcached refuses items of 1 MiB and more by default, so values are chunked by the base
above ``max_item_bytes``. It has no key listing: ``_list`` walks the server's items
(``memcached_listing``). It is a cache: when its memory is full it evicts the least
recently used items, so size the server for a round's traffic.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pymemcache.client.base
from pymemcache.exceptions import (
    MemcacheError,
    MemcacheIllegalInputError,
    MemcacheServerError,
    MemcacheUnexpectedCloseError,
)

from lambdaml import credentials
from lambdaml import keys as K
from lambdaml.buffers import Buffers, Placed, Target, Value, cut, joined, size
from lambdaml.channels import memcached_io
from lambdaml.channels.base import Channel
from lambdaml.channels.chunks import WRITE_ID, Manifest, check_parts, manifest_of, part_spans, reassembled_wrong
from lambdaml.channels.kinds.memcached import DESCRIPTION, MemcachedSpec
from lambdaml.channels.memcached_auth import AuthenticatingPool
from lambdaml.channels.memcached_listing import MetadumpListing
from lambdaml.errors import ChannelError, ChannelUnavailable, ChannelUnreachable, KeyNotFound, TransientChannelError

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

R = TypeVar("R")

DEFAULT_PORT = 11211
# The 1 MiB default item limit counts the item's header (about 56 bytes) and its key (at most 250)
# too: 1 MiB less 1 KiB leaves room for both, and a 1 MB piece (d = 1e6 over W = 4) fits in one item.
DEFAULT_MAX_ITEM_BYTES = 1_047_552
SOCKET_TIMEOUT_S = 30.0  # bounds every command, including a 1 MB get
LIST_TIMEOUT_S = 30.0  # bounds a whole metadump walk, BUSY retries included
_BATCH = 100  # keys per multi-get / multi-delete request

# pymemcache reads responses 4 KB per recv() and has no option for it: a large value would take
# hundreds of system calls.
pymemcache.client.base.RECV_SIZE = max(pymemcache.client.base.RECV_SIZE, 64 * 1024)


class _IntoRead:
    """A value read into its target over the polls of one wait: each part of a value chunked at the
    target's length goes to its place as soon as a poll finds it, and is not asked for again."""

    def __init__(self, key: str, target: Target, limit: int) -> None:
        head, body = target
        self.key, self.total = key, head + body.nbytes
        self.held = bytearray(head)
        self.value = (memoryview(self.held), body)
        self.spans = part_spans(self.total, limit)
        self.part_keys = [K.chunk_part(key, n) for n in range(len(self.spans))]
        self.index = {part: n for n, part in enumerate(self.part_keys)}
        self.write_ids = bytearray(WRITE_ID * len(self.spans))
        self.have: set[int] = set()  # the parts read so far

    def wanted(self) -> list[str]:
        """The key, then the parts not read yet."""
        return [self.key, *(part for n, part in enumerate(self.part_keys) if n not in self.have)]

    def manifest(self, raw: bytes | bytearray, kind: str) -> Manifest | None:
        """The manifest ``raw`` is, where it names a value cut as this read cuts it (else None)."""
        manifest = manifest_of(self.key, bytes(raw), kind)
        if manifest is None or (manifest.parts, manifest.total) != (len(self.spans), self.total):
            return None
        return manifest

    def part(self, key: str, length: int) -> list[memoryview] | None:
        """Where a part goes (its write id, then its bytes at its place); None if it is not of its length here."""
        n = self.index[key]
        start, stop = self.spans[n]
        if length != stop - start + WRITE_ID:
            return None
        return [
            memoryview(self.write_ids)[n * WRITE_ID : (n + 1) * WRITE_ID],
            *(memoryview(view) for view in cut(self.value, start, stop)),
        ]

    def check(self, manifest: Manifest, kind: str) -> None:
        """Refuse the value if a part is missing or of another write (then all are read again)."""
        heads = {self.part_keys[n]: bytes(self.write_ids[n * WRITE_ID : (n + 1) * WRITE_ID]) for n in self.have}
        data_bytes = sum(stop - start for n, (start, stop) in enumerate(self.spans) if n in self.have)
        if any(head != manifest.write_id for head in heads.values()):
            self.have.clear()
        check_parts(manifest, heads, data_bytes, kind)


def _dropped(length: int) -> list[memoryview]:
    """Buffers for ``length`` bytes nobody keeps: one 64 KB buffer, over and over."""
    if not length:
        return []
    scratch = memoryview(bytearray(min(length, 1 << 16)))
    whole, rest = divmod(length, len(scratch))
    return [scratch] * whole + ([scratch[:rest]] if rest else [])


class MemcachedChannel(Channel):
    """Values as memcached items; set_many and get_many for batch writes and reads."""

    kind = DESCRIPTION.name
    first_poll_s = 0.0001  # an in-memory store (``Channel.first_poll_s``)
    put_batch = _BATCH
    ordered_writes = DESCRIPTION.ordered_writes

    def __init__(
        self,
        client: Any,
        server: tuple[str, int] | None = None,
        max_item_bytes: int | None = DEFAULT_MAX_ITEM_BYTES,
        *,
        list_timeout_s: float = LIST_TIMEOUT_S,
        login: credentials.Credentials | None = None,
    ) -> None:
        super().__init__()
        self.client = client
        self.login = login
        if server is None:
            server = getattr(client, "server", None)
        if server is None or isinstance(server, str):
            raise ChannelError("the memcached channel needs the server's (host, port) to list keys")
        self.server: tuple[str, int] = (str(server[0]), int(server[1]))
        self.max_item_bytes = max_item_bytes
        self.endpoint = f"{self.server[0]}:{self.server[1]}"
        # The key listing opens its own connections, which log in too.
        self._listing = MetadumpListing(self.server, login, list_timeout_s, SOCKET_TIMEOUT_S)

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> MemcachedChannel:
        spec = MemcachedSpec.of(spec)
        server = (spec.host, spec.port or DEFAULT_PORT)
        login = None
        if spec.auth is not None:
            login = credentials.resolve(spec.auth, region=spec.region)
            if not login.username:
                raise ChannelError("memcached authentication needs a user: channel.auth.username, or in the secret")
        client = AuthenticatingPool(
            server,
            login=login,
            connect_timeout=spec.connect_timeout_s,
            timeout=SOCKET_TIMEOUT_S,
            no_delay=True,  # without TCP_NODELAY a 40 KB get waits ~40 ms on delayed ACKs
            default_noreply=False,  # a refused set must be seen, not assumed stored
        )
        return cls(client, server, spec.max_item_bytes or DEFAULT_MAX_ITEM_BYTES, login=login)

    def describe(self) -> str:
        return f"memcached://{self.endpoint}"

    def refuses_anonymous_clients(self) -> bool:
        """A get on a fresh connection that does not log in: a server with -Y answers it with a CLIENT_ERROR."""
        try:
            with socket.create_connection(self.server, timeout=SOCKET_TIMEOUT_S) as sock:
                sock.sendall(b"get lambdaml-anonymous-probe\r\n")
                answer = b""
                while b"\r\n" not in answer and len(answer) < 4096:
                    part = sock.recv(4096)
                    if not part:
                        break
                    answer += part
        except OSError as exc:
            raise ChannelUnreachable(f"cannot reach memcached at {self.endpoint}: {exc}") from exc
        return answer.startswith((b"CLIENT_ERROR", b"ERROR")) or not answer

    def _call(self, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run one client call, translating pymemcache and socket errors at the boundary."""
        try:
            return fn(*args, **kwargs)
        except MemcacheUnexpectedCloseError as exc:
            raise TransientChannelError(f"memcached at {self.endpoint} closed the connection during {what}") from exc
        except MemcacheServerError as exc:
            raise ChannelError(f"memcached at {self.endpoint} refused {what}: {exc}") from exc
        except MemcacheIllegalInputError as exc:
            raise ChannelError(f"memcached {what}: invalid input: {exc}") from exc
        except MemcacheError as exc:
            # A server with -Y takes a client's first set as its login: without one it says "authentication failure".
            if self.login is None and ("unauthenticated" in str(exc) or "authentication failure" in str(exc)):
                raise ChannelUnavailable(
                    f"memcached at {self.endpoint} requires authentication: name where the password is kept in "
                    "channel.auth (secret_env or secret_id) and the user in channel.auth.username"
                ) from None
            raise ChannelError(f"memcached {what} failed at {self.endpoint}: {exc}") from exc
        except (TimeoutError, OSError) as exc:  # refused, reset, unreachable, timed out
            raise ChannelUnreachable(f"cannot reach memcached at {self.endpoint}: {exc}") from exc

    @property
    def _connections(self) -> Any:
        """The pooled client's connections, where the channel built its client (None: a client passed in
        as it is, used through its own commands): their sockets carry the commands that copy nothing."""
        return getattr(self.client, "client_pool", None)

    def _put(self, key: str, data: bytes) -> None:
        self._write([(key, data)])

    def _put_batch(self, items: Sequence[tuple[str, bytes]]) -> None:
        self._write(items)

    def _write(self, batch: Sequence[tuple[str, Value]]) -> None:
        refused = self._set(batch)
        if refused and len(batch) == 1:
            raise ChannelError(f"memcached at {self.endpoint} did not store {refused[0]} ({size(batch[0][1])} bytes)")
        if refused:
            raise ChannelError(
                f"memcached at {self.endpoint} did not store {len(refused)} of {len(batch)} keys (first: {refused[0]})"
            )

    def _set(self, items: Sequence[tuple[str, Value]]) -> list[str]:
        """Store the items with pipelined ``set`` commands; returns the keys the server refused.

        pymemcache builds each command by concatenating it with its value, two copies of
        every byte: on a pooled client the commands go out with one ``sendmsg`` from the
        values' own memory instead.
        """
        what = f"set {items[0][0]}" if len(items) == 1 else f"set of {len(items)} keys"
        pool = self._connections
        if pool is None:  # a client passed in as it is: its own commands
            if len(items) == 1:
                key, data = items[0]
                return [] if self._call(what, self.client.set, key, joined(data), noreply=False) else [key]
            values = {key: joined(data) for key, data in items}
            return [str(k) for k in self._call(what, self.client.set_many, values, noreply=False)]

        def store() -> list[str]:
            with pool.get_and_release(destroy_on_fail=True) as client:
                return memcached_io.send_sets(client, items)

        return self._call(what, store)

    def _get(self, key: str) -> bytes:
        value = self._call(f"get {key}", self.client.get, key)
        if value is None:
            raise KeyNotFound(f"memcached://{self.endpoint}/{key} not found")
        return bytes(value)

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        unique = list(dict.fromkeys(keys))
        batches = [unique[i : i + _BATCH] for i in range(0, len(unique), _BATCH)]
        pool = self._connections

        def fetch(batch: list[str]) -> dict[str, bytes]:
            what = f"get of {len(batch)} keys"
            if pool is None:  # a client passed in as it is: its own commands
                values = self._call(what, self.client.get_many, batch)
                return {str(k): bytes(v) for k, v in values.items() if v is not None}
            found: dict[str, bytes] = {}

            def place(key: str, length: int) -> list[memoryview]:
                found[key] = buffer = bytearray(length)  # type: ignore[assignment]  # read-only from here on
                return [memoryview(buffer)]

            self._call(what, self._get_into, pool, batch, place)
            return found

        found: dict[str, bytes] = {}
        for part in self._map(fetch, batches):
            found.update(part)
        return found

    def _join_chunked(self, manifests: Sequence[Manifest]) -> dict[str, bytes]:
        """Each value's parts read straight into one buffer of its size, at their offsets: one
        ``get`` of all its parts, in order, on one connection; the values concurrently."""
        pool = self._connections
        if pool is None:
            return super()._join_chunked(manifests)

        def read(manifest: Manifest) -> tuple[str, bytes]:
            value = bytearray(manifest.total)
            self._read_parts(pool, manifest, (memoryview(value),))
            return manifest.key, value  # type: ignore[return-value]  # read-only from here on

        return dict(self._map(read, manifests))

    def _into_poll(self, targets: Mapping[str, Target]) -> Callable[[list[str]], Mapping[str, bytes | Placed]]:
        """A value longer than an item, as its target expects, is read into the target over the
        wait's polls: each poll is one ``get`` of its manifest and the parts not read yet, so no
        round trip goes to the manifest alone, and each part is read once, whenever it is there
        (the manifest is stored after every part: ``ordered_writes``)."""
        pool, limit = self._connections, self.max_item_bytes
        reads = {
            key: _IntoRead(key, target, limit)
            for key, target in targets.items()
            if limit is not None and target[0] + target[1].nbytes > limit
        }
        if pool is None or not reads:
            return super()._into_poll(targets)

        def poll(pending: list[str]) -> dict[str, bytes | Placed]:
            found: dict[str, bytes | Placed] = dict(self.get_many([key for key in pending if key not in reads]))
            chunked = [reads[key] for key in pending if key in reads]
            for key, value in self._map(lambda read: (read.key, self._retry(self._read_into, pool, read)), chunked):
                if value is not None:
                    found[key] = value
            return found

        return poll

    def _sized_poll(self, lengths: Mapping[str, int]) -> Callable[[list[str]], Mapping[str, bytes]]:
        """A value longer than an item whose length the reader knows is read as into a target
        (``_into_poll``): into a buffer of its length, made once for the whole wait."""
        limit = self.max_item_bytes
        buffers = {key: bytearray(n) for key, n in lengths.items() if limit is not None and n > limit}
        if self._connections is None or not buffers:
            return super()._sized_poll(lengths)
        into = self._into_poll({key: (0, memoryview(buffer)) for key, buffer in buffers.items()})

        def poll(pending: list[str]) -> dict[str, bytes]:
            found = self.get_many([key for key in pending if key not in buffers])
            for key, value in into([key for key in pending if key in buffers]).items():
                found[key] = buffers[key] if isinstance(value, Placed) else value  # type: ignore[assignment]
            return found

        return poll

    def _read_into(self, pool: Any, read: _IntoRead) -> bytes | Placed | None:
        """One poll of ``read``: the value (None: its manifest is not there yet), ``Placed`` where it
        is chunked at its target's length."""
        stored: bytearray | None = None  # what the key itself holds: the manifest, or a value of another length
        placed: list[int] = []
        received, misfits = 0, 0  # misfits: parts not cut as this reader cuts (another length or item limit)

        def place(name: str, length: int) -> Sequence[memoryview]:
            nonlocal stored, received, misfits
            received += length
            if name == read.key:  # asked for first, so it comes before any part
                stored = bytearray(length)
                return [memoryview(stored)]
            views = None if stored is not None and read.manifest(stored, self.kind) is None else read.part(name, length)
            if views is None:
                misfits += 1
                return _dropped(length)
            placed.append(read.index[name])
            return views

        self._call(f"get of {read.key} and its parts", self._get_into, pool, read.wanted(), place)
        read.have.update(placed)
        self.stats.add(gets=1 + len(placed), bytes_received=received)
        if stored is None:
            return None
        raw = bytes(stored)
        manifest = read.manifest(raw, self.kind)
        if misfits or manifest is None:  # not chunked as the target expects: read as any value
            return self._assemble({read.key: raw})[read.key]
        read.check(manifest, self.kind)
        return Placed(bytes(read.held))

    def _read_parts(self, pool: Any, manifest: Manifest, value: Buffers) -> None:
        """The manifest's parts read into ``value`` (buffers of ``manifest.total`` bytes in all), at
        their offsets: one ``get`` of all the parts, in order, on one connection; refused if one
        is missing, of another write, or of other lengths."""
        write_ids = bytearray(WRITE_ID * manifest.parts)
        where = {key: i for i, key in enumerate(manifest.part_keys)}
        offset = 0

        def place(key: str, length: int) -> list[memoryview]:
            nonlocal offset
            i, start = where[key], offset
            offset += length - WRITE_ID
            if length < WRITE_ID or offset > manifest.total:
                raise reassembled_wrong(manifest, self.kind)
            head = memoryview(write_ids)[i * WRITE_ID : (i + 1) * WRITE_ID]
            return [head, *(memoryview(view) for view in cut(value, start, offset))]

        found = self._call(f"get of {manifest.parts} parts", self._get_into, pool, manifest.part_keys, place)
        heads = {key: bytes(write_ids[where[key] * WRITE_ID : (where[key] + 1) * WRITE_ID]) for key in found}
        check_parts(manifest, heads, offset, self.kind)

    @staticmethod
    def _get_into(pool: Any, keys: Sequence[str], place: memcached_io.Placer) -> list[str]:
        with pool.get_and_release(destroy_on_fail=True) as client:
            return memcached_io.get_into(client, keys, place)

    def _delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), _BATCH):
            batch = list(keys[start : start + _BATCH])
            self._call(f"delete of {len(batch)} keys", self.client.delete_many, batch, noreply=False)

    def _list(self, prefix: str) -> Iterable[str]:
        return self._listing.keys(prefix)

    def ensure(self) -> None:
        """Nothing to create; check the server answers, so a bad endpoint fails at setup."""
        self.ping()

    def ping(self) -> None:
        self._call("version", self.client.version)

    def close(self) -> None:
        super().close()
        self.client.close()
