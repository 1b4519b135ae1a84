"""The in-memory channel: a dict behind a lock, for unit tests and single-process runs.

It is process-local: workers in other processes (or Lambda invocations) cannot see it,
so use it only where every rank runs as a thread of one process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from lambdaml.channels.base import Channel
from lambdaml.channels.kinds.memory import DESCRIPTION
from lambdaml.errors import KeyNotFound

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec


class MemoryChannel(Channel):
    """A thread-safe dict."""

    kind = DESCRIPTION.name

    def __init__(self) -> None:
        super().__init__()
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> MemoryChannel:
        """A new, empty channel each time (a spec cannot name a shared in-memory store)."""
        return cls()

    def _put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._data[key] = bytes(data)

    def _put_new(self, key: str, data: bytes) -> bool:
        with self._lock:
            if key in self._data:
                return False
            self._data[key] = bytes(data)
            return True

    def _get(self, key: str) -> bytes:
        with self._lock:
            try:
                return self._data[key]
            except KeyError:
                raise KeyNotFound(f"memory://{key} not found") from None

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        with self._lock:
            return {k: self._data[k] for k in keys if k in self._data}

    def _list(self, prefix: str) -> Iterable[str]:
        with self._lock:
            return [k for k in self._data if k.startswith(prefix)]

    def _delete(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._data.pop(key, None)
