"""A channel kind from outside lambdaml: ``dictstore``, values in a dict that the workers of one
process share, like the in-memory channel but written here, against the public interfaces only.

Its spec model and its description are all lambdaml learns of it; a test declares
``DESCRIPTION`` in the ``lambdaml.plugins`` entry-point group (``tests/integration/test_channel_plugin.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field

from lambdaml.catalogue import ChannelInfo
from lambdaml.channels import Channel
from lambdaml.config import ChannelSpec
from lambdaml.errors import KeyNotFound

DESCRIPTION = ChannelInfo(
    "dictstore",
    f"{__name__}:DictStoreChannel",
    spec=f"{__name__}:DictStoreSpec",
    title="dict-store",
    connects_processes=False,  # a process's dict: its workers run as threads
    authenticates_clients=True,  # no other party reaches the process's memory
)

#: The process's stores by name, each with its lock: every channel opened on a space sees its values.
_SPACES: dict[str, tuple[dict[str, bytes], threading.Lock]] = {}
_SPACES_LOCK = threading.Lock()


class DictStoreSpec(ChannelSpec):
    kind: Literal["dictstore"] = "dictstore"
    space: str = Field("default", min_length=1, max_length=64)  # which of the process's stores


class DictStoreChannel(Channel):
    """A dict of the process's, behind its lock."""

    kind = DESCRIPTION.name

    def __init__(self, space: str) -> None:
        super().__init__()
        self.space = space
        with _SPACES_LOCK:
            self._data, self._lock = _SPACES.setdefault(space, ({}, threading.Lock()))

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> DictStoreChannel:
        return cls(DictStoreSpec.of(spec).space)

    def describe(self) -> str:
        return f"dictstore://{self.space}"

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
                raise KeyNotFound(f"dictstore://{self.space}/{key} not found") from None

    def _list(self, prefix: str) -> Iterable[str]:
        with self._lock:
            return [key for key in self._data if key.startswith(prefix)]

    def _delete(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._data.pop(key, None)
