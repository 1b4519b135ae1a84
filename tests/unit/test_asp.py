"""ASP/SSP update logs: every push applied exactly once by every worker, storage bounded."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.errors import SyncTimeout
from lambdaml.sync.asp import PRUNE_EVERY, AsyncUpdates

WORLD = 4
D = 6


def update(rank: int, seq: int) -> np.ndarray:
    """A distinct, exactly representable update per (rank, seq)."""
    vector = np.zeros(D)
    vector[rank] = 2.0**-seq if seq < 40 else 0.0
    vector[-1] = 1.0  # counts updates
    return vector


def run_workers(channel: MemoryChannel, pushes: list[int], staleness: int | None = None) -> list[dict[str, object]]:
    """W threads push their updates and merge; each returns its final model and stats."""
    results: list[dict[str, object]] = [{} for _ in range(WORLD)]
    errors: list[BaseException] = []

    def worker(rank: int) -> None:
        try:
            comm = ChannelCommunicator(channel, "asp-test", rank, WORLD, timeout_s=20)
            sync = AsyncUpdates(comm, staleness=staleness)
            model = np.zeros(D)
            for seq in range(1, pushes[rank] + 1):
                delta = update(rank, seq)
                model += delta + sync.push_pull(delta)
            model += sync.drain(model)
            results[rank] = {"model": model, "stats": sync.stats()}
            comm.finish()
        except BaseException as exc:  # surfaced below with the rank's context
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results


def test_every_update_applied_exactly_once() -> None:
    channel = MemoryChannel()
    pushes = [50, 37, 50, 20]  # unequal: a worker that finishes early must not stall the others
    results = run_workers(channel, pushes)
    expected = sum(update(r, s) for r in range(WORLD) for s in range(1, pushes[r] + 1))
    for result in results:
        np.testing.assert_array_equal(result["model"], expected)  # a lost or doubled push shows here
        stats = result["stats"]
        assert isinstance(stats, dict)
        assert stats["applied"] == sum(pushes)
        assert stats["version"] == sum(pushes)
    assert channel.list(keys.comm_prefix("asp-test")) == []


def test_a_resumed_worker_replays_its_pushes_since_the_checkpoint_instead_of_repeating_them() -> None:
    channel = MemoryChannel()
    other = AsyncUpdates(ChannelCommunicator(channel, "replay", 1, 2, timeout_s=5))
    first = AsyncUpdates(ChannelCommunicator(channel, "replay", 0, 2, timeout_s=5))
    first.resumable = True
    model = np.zeros(D)
    for seq in range(1, 3):
        model += update(0, seq) + first.push_pull(update(0, seq))
    saved_model, saved = model.copy(), first.state_dict()
    first.checkpointed()
    for seq in range(3, 5):  # pushed, then the worker dies before its next checkpoint
        first.push_pull(update(0, seq))
    other_model = np.zeros(D)
    for seq in range(1, 4):
        other_model += update(1, seq) + other.push_pull(update(1, seq))

    resumed = AsyncUpdates(ChannelCommunicator(channel, "replay", 0, 2, timeout_s=5))
    resumed.load_state_dict(saved)
    model = saved_model
    for seq in range(3, 6):  # recomputed steps differ; the written ones stand
        delta = update(0, seq) * 3
        model += delta + resumed.push_pull(delta)
    drained: list[np.ndarray] = []
    waiter = threading.Thread(target=lambda: drained.append(other.drain(other_model)))
    waiter.start()  # drain waits for every rank's end marker
    model += resumed.drain(model)
    waiter.join(timeout=10)
    other_model += drained[0]
    expected = sum(update(0, s) for s in range(1, 5)) + update(0, 5) * 3 + sum(update(1, s) for s in range(1, 4))
    np.testing.assert_array_equal(model, expected)
    np.testing.assert_array_equal(other_model, expected)


def test_fully_read_updates_are_pruned_as_the_job_goes() -> None:
    channel = MemoryChannel()
    comm = ChannelCommunicator(channel, "prune", 0, 1, timeout_s=5)
    sync = AsyncUpdates(comm)
    for _ in range(PRUNE_EVERY * 3):
        sync.push_pull(np.ones(2))
    comm.finish()  # waits for the background pruning; rank 0 then clears the rest
    assert sync.log.deleted_upto[0] >= PRUNE_EVERY * 2


def test_ssp_blocks_a_worker_that_runs_ahead() -> None:
    channel = MemoryChannel()
    fast = AsyncUpdates(ChannelCommunicator(channel, "ssp", 0, 2, timeout_s=0.3), staleness=2)
    for _ in range(2):
        fast.push_pull(np.ones(1))  # within the bound: rank 1 has pushed nothing, 2 - 2 = 0
    with pytest.raises(SyncTimeout, match="rank 1 stayed more than 2 pushes behind"):
        fast.push_pull(np.ones(1))


def test_staleness_is_what_was_merged_after_each_push() -> None:
    channel = MemoryChannel()
    a = AsyncUpdates(ChannelCommunicator(channel, "stale", 0, 2, timeout_s=5))
    b = AsyncUpdates(ChannelCommunicator(channel, "stale", 1, 2, timeout_s=5))
    b.push_pull(np.ones(1))
    b.push_pull(np.ones(1))
    merged = a.push_pull(np.ones(1))
    assert merged[0] == 2.0
    assert a.staleness_seen == [2]


def test_a_reader_asks_for_about_what_arrived_and_catches_up_on_a_burst() -> None:
    from lambdaml.sync.asp import UpdateLog

    channel = MemoryChannel()
    writers = [UpdateLog(channel, "asp-window", r, WORLD, timeout_s=5) for r in range(1, WORLD)]
    reader = UpdateLog(channel, "asp-window", 0, WORLD, timeout_s=5)
    for _ in range(20):  # steady state: every other rank pushed one update since the last read
        for writer in writers:
            writer.append(b"u")
        before = channel.stats.gets
        assert len(reader.read_new()) == WORLD - 1
        assert channel.stats.gets - before <= 2 * (WORLD - 1)  # one found and one missing key per rank
    for _ in range(40):  # a burst: rank 1 pushed 40 while this reader was busy
        writers[0].append(b"u")
    assert len(reader.read_new()) == 40  # all of it in one read, none skipped
    assert reader.cursor().tolist() == [0, 60, 20, 20]
