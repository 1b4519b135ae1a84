"""Heartbeats: after an epoch a worker records where it is, and learns whether its job was cancelled.

Every backend's workers beat the same way (Lambda, local processes, torchrun ranks), so a
job's status and its cancellation work alike wherever it runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.errors import JobCancelled
from lambdaml.runtime.records import Attempt
from lambdaml.storage import put_json

#: Puts heartbeat records beside the cancel key's get; one thread a process (a warm Lambda
#: container's invocations share it), started at the first beat.
_RECORDER = ThreadPoolExecutor(1, thread_name_prefix="heartbeat")

#: Called after every epoch with (rank, epoch, mean loss, seconds since start).
EpochCallback = Callable[[int, int, float, float], None]


def heartbeat(
    store: Channel,
    attempt: Attempt,
    *,
    invocation: int = 1,
    every_s: float = 0.0,
    final_epoch: int | None = None,
    clock: Callable[[], float] = time.time,
) -> EpochCallback:
    """Record a rank's epoch under its attempt; raise JobCancelled once the attempt is cancelled.

    With ``every_s``, a rank beats after its first epoch and then after an epoch that ends in a
    new ``every_s``-long slot since the attempt began: the ranks of a BSP job, in lockstep, beat
    after the same epoch, so a round waits for their beats once. ``final_epoch`` (the job's last)
    always beats, so a finished rank's record shows where it ended. The record's put and the cancel
    key's get are independent: they go out at once, and the beat returns when both are done (an
    epoch waits for one request's time, not two), so a failed put still fails the beat.
    """
    cancel = keys.job_cancel(attempt.job_id, attempt.number)
    last_slot: int | None = None

    def beat(rank: int, epoch: int, loss: float, elapsed: float) -> None:
        nonlocal last_slot
        if every_s > 0 and epoch != final_epoch:
            slot = math.floor((clock() - attempt.started_at) / every_s)
            if slot == last_slot:
                return
            last_slot = slot
        record = {"rank": rank, "epoch": epoch, "loss": loss, "elapsed_s": elapsed, "invocation": invocation}
        key = keys.worker_heartbeat(attempt.job_id, attempt.number, rank)
        recorded = _RECORDER.submit(put_json, store, key, {**record, "state": "running", "at": time.time()})
        try:
            cancelled = bool(store.get_many([cancel]))
        finally:
            recorded.result()
        if cancelled:
            raise JobCancelled(f"job {attempt.job_id} was cancelled")

    return beat


def both(first: EpochCallback, then: EpochCallback) -> EpochCallback:
    def call(rank: int, epoch: int, loss: float, elapsed: float) -> None:
        first(rank, epoch, loss, elapsed)
        then(rank, epoch, loss, elapsed)

    return call
