"""Two ``data prepare NAME --overwrite`` at once keep a whole dataset, with the race forced at a fixed point.

Both used to exit 0 while one's prune deleted the other's half-written version, and
``current.json`` ended up naming a version with 13 of its 32 shards missing. Now a version
being written holds a lease that prunes leave alone, and the pointer moves only to a version
whose every object is present.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.data import shards
from lambdaml.errors import DataError

SHARDS = 8


class Paused(MemoryChannel):
    """A store where the thread named ``slow`` stops before writing its 4th shard until released."""

    def __init__(self) -> None:
        super().__init__()
        self.reached, self.release = threading.Event(), threading.Event()

    def _put(self, key: str, data: bytes) -> None:
        if threading.current_thread().name == "slow" and key.endswith("shards/00003"):
            self.reached.set()
            assert self.release.wait(60), "never released"
        super()._put(key, data)


def rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(80, 3)).astype(np.float32), rng.integers(0, 2, 80).astype(np.float64)


def whole(store: MemoryChannel, name: str) -> shards.Manifest:
    manifest = shards.read_manifest(store, name)
    for rank in range(SHARDS):
        shards.load_worker_data(store, manifest, rank, SHARDS)  # every shard present and its hash right
    return manifest


def test_a_prepare_that_finishes_during_another_leaves_both_versions_whole() -> None:
    store = Paused()
    shards.prepare(store, "d", *rows(0), shards=SHARDS)  # the version both replace
    errors: list[BaseException] = []

    def slow() -> None:
        try:
            shards.prepare(store, "d", *rows(1), shards=SHARDS, overwrite=True)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=slow, name="slow")
    thread.start()
    assert store.reached.wait(60)
    # the slow prepare is parked mid-write; the fast one runs start to end, and prunes
    fast = shards.prepare(store, "d", *rows(2), shards=SHARDS, overwrite=True)
    assert whole(store, "d").dataset_version == fast.dataset_version
    store.release.set()
    thread.join(60)
    assert not errors, errors
    final = whole(store, "d")  # the slow one's version, every shard of it present
    assert final.dataset_version != fast.dataset_version
    assert not [k for k in store.list("datasets/d/") if k.endswith("writing.json")]  # leases released


def test_the_pointer_does_not_move_to_a_version_with_a_missing_shard() -> None:
    class Losing(MemoryChannel):
        def _put(self, key: str, data: bytes) -> None:
            super()._put(key, data)
            if key.endswith("manifest.json"):  # a shard vanishes before the pointer switches
                self._data.pop(next(k for k in list(self._data) if k.endswith("shards/00002")), None)

    store = Losing()
    with pytest.raises(DataError, match=r"lost 1 of its objects while it was written \(first: .*shards/00002\)"):
        shards.prepare(store, "d", *rows(0), shards=SHARDS)
    assert shards.current_version(store, "d") is None


def test_an_abandoned_lease_does_not_keep_a_version_forever(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryChannel()
    first = shards.prepare(store, "d", *rows(0), shards=2)
    abandoned = "20200101T000000-abcdef"
    store.put(keys.dataset_shard("d", abandoned, 0), b"half")
    store.put(keys.dataset_lease("d", abandoned), b'{"started": 0}')  # a crash, long ago
    shards.prepare(store, "d", *rows(1), shards=2, overwrite=True)
    assert not store.list(keys.dataset_version_prefix("d", abandoned))
    assert store.list(keys.dataset_version_prefix("d", first.dataset_version))  # the previous version stays
