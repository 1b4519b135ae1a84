"""The heartbeat's record put and cancel-key get go out together; both must finish before the beat returns."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence

import pytest

from lambdaml import keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.errors import ChannelError, JobCancelled
from lambdaml.runtime.heartbeat import Heartbeat
from lambdaml.runtime.records import Attempt


def _attempt() -> Attempt:
    return Attempt(job_id="beat-job", number=1, dataset_version="v1", started_at=time.time())


class _SlowPut(MemoryChannel):
    """A store whose puts take a while and can fail, and that tells whether a get ran during a put."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.putting = threading.Event()
        self.got_during_put = False

    def _put(self, key: str, data: bytes) -> None:
        self.putting.set()
        time.sleep(0.2)
        self.putting.clear()
        if self.fail:
            raise ChannelError("put refused")
        super()._put(key, data)

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        self.putting.wait(5)
        self.got_during_put = self.putting.is_set()
        return super()._get_many(keys)


def test_beat_records_the_epoch_with_the_cancel_check_alongside() -> None:
    store = _SlowPut()
    Heartbeat(store, _attempt())(rank=1, epoch=3, loss=0.5, elapsed=2.0)
    record = json.loads(store.get(keys.worker_heartbeat("beat-job", 1, 1)))
    assert (record["rank"], record["epoch"], record["state"]) == (1, 3, "running")
    assert store.got_during_put  # the get went out while the put was in flight


def test_cancelled_attempt_raises_after_the_record_is_written() -> None:
    store = _SlowPut()
    store.put(keys.job_cancel("beat-job", 1), b"{}")
    with pytest.raises(JobCancelled, match="beat-job was cancelled"):
        Heartbeat(store, _attempt())(0, 1, 0.1, 1.0)
    assert json.loads(store.get(keys.worker_heartbeat("beat-job", 1, 0)))["epoch"] == 1


def test_failed_record_put_fails_the_beat() -> None:
    with pytest.raises(ChannelError, match="put refused"):
        Heartbeat(_SlowPut(fail=True), _attempt())(0, 1, 0.1, 1.0)


def test_beats_once_per_slot_of_the_attempt_after_the_first_epoch() -> None:
    store = MemoryChannel()
    attempt = _attempt()
    now = [attempt.started_at + 0.2]
    beat = Heartbeat(store, attempt, every_s=1.0, clock=lambda: now[0])
    key = keys.worker_heartbeat("beat-job", 1, 0)
    beaten = []
    # Epochs end at 0.2 s (the first: beats), 0.5, 0.9 (same slot), 1.1 (a new slot), 1.6, 3.4.
    for epoch, at in enumerate([0.2, 0.5, 0.9, 1.1, 1.6, 3.4], start=1):
        now[0] = attempt.started_at + at
        beat(0, epoch, 0.1, at)
        beaten.append(json.loads(store.get(key))["epoch"])
    assert beaten == [1, 1, 1, 4, 4, 6]


def test_a_cancel_is_seen_at_the_next_beat_not_between() -> None:
    store = MemoryChannel()
    attempt = _attempt()
    now = [attempt.started_at]
    beat = Heartbeat(store, attempt, every_s=1.0, clock=lambda: now[0])
    beat(0, 1, 0.1, 0.0)
    store.put(keys.job_cancel("beat-job", 1), b"{}")
    now[0] += 0.5
    beat(0, 2, 0.1, 0.5)  # the same slot: no request, so no cancel yet
    now[0] += 0.6
    with pytest.raises(JobCancelled):
        beat(0, 3, 0.1, 1.1)


def test_the_final_epoch_always_beats() -> None:
    store = MemoryChannel()
    attempt = _attempt()
    now = [attempt.started_at + 0.1]
    beat = Heartbeat(store, attempt, every_s=1.0, final_epoch=3, clock=lambda: now[0])
    key = keys.worker_heartbeat("beat-job", 1, 0)
    for epoch in (1, 2, 3):  # all within the attempt's first second
        beat(0, epoch, 0.1, 0.1 * epoch)
        now[0] += 0.1
        assert json.loads(store.get(key))["epoch"] == (1 if epoch < 3 else 3)
