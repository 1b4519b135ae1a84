"""A channel's abstract core: the four primitives a backend implements, and its capabilities.

A backend implements ``_put``, ``_get``, ``_list`` and ``_delete``, translating its client's
errors into ``lambdaml.errors`` where they enter, and where it has them, batch reads and writes,
ranged reads and conditional writes. Here, once: retries of what the backend calls transient,
and the thread pool that multi-key operations run on. The rich layer (``values``) and the
waits (``base``) are written on top of these.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar, Self, TypeVar

from lambdaml import buffers
from lambdaml import keys as K
from lambdaml.buffers import Value
from lambdaml.channels.stats import ChannelStats
from lambdaml.errors import ChannelError, ChannelUnreachable, KeyNotFound, TransientChannelError

log = logging.getLogger(__name__)
R = TypeVar("R")
T = TypeVar("T")


class ChannelCore(ABC):
    """The primitives of a key/value store, retried, and what the store can do."""

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

    def __init__(self) -> None:
        self.stats = ChannelStats()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

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

    # ---- what some backends do in fewer requests -------------------------------------

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

    # ---- the endpoint ----------------------------------------------------------------

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

    def describe(self) -> str:
        return self.kind

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- running requests --------------------------------------------------------------

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
