"""Heartbeats: after every epoch a worker records where it is, and learns whether its job was cancelled.

Every backend's workers beat the same way (Lambda, local processes, torchrun ranks), so a
job's status and its cancellation work alike wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.errors import JobCancelled
from lambdaml.runtime.records import Attempt
from lambdaml.storage import put_json

#: Called after every epoch with (rank, epoch, mean loss, seconds since start).
EpochCallback = Callable[[int, int, float, float], None]


def heartbeat(store: Channel, attempt: Attempt, *, invocation: int = 1) -> EpochCallback:
    """Record a rank's epoch under its attempt; raise JobCancelled once the attempt is cancelled."""
    cancel = keys.job_cancel(attempt.job_id, attempt.number)

    def beat(rank: int, epoch: int, loss: float, elapsed: float) -> None:
        record = {"rank": rank, "epoch": epoch, "loss": loss, "elapsed_s": elapsed, "invocation": invocation}
        key = keys.worker_heartbeat(attempt.job_id, attempt.number, rank)
        put_json(store, key, {**record, "state": "running", "at": time.time()})
        if store.get_many([cancel]):
            raise JobCancelled(f"job {attempt.job_id} was cancelled")

    return beat


def both(first: EpochCallback, then: EpochCallback) -> EpochCallback:
    def call(rank: int, epoch: int, loss: float, elapsed: float) -> None:
        first(rank, epoch, loss, elapsed)
        then(rank, epoch, loss, elapsed)

    return call
