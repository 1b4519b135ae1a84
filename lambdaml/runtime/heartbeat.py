"""Heartbeats: a worker records where it is, and learns after an epoch whether its job was cancelled.

Every backend's workers beat the same way (Lambda, local processes, torchrun ranks), so a
job's status and its cancellation work alike wherever it runs. A record holds the rank's epochs
so far (the newest ``HISTORY`` of them), so a follower that polls it prints every epoch once,
whichever beats it missed; within a long epoch the rank also records the steps it has done.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NotRequired, ParamSpec, TypedDict

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.errors import JobCancelled, KeyNotFound
from lambdaml.runtime.records import Attempt

log = logging.getLogger(__name__)

#: Puts heartbeat records beside the cancel key's get; one thread a process (a warm Lambda
#: container's invocations share it), started at the first beat. One thread keeps a rank's
#: records in the order they were made.
_RECORDER = ThreadPoolExecutor(1, thread_name_prefix="heartbeat")


class HeartbeatRecord(TypedDict):
    """A rank's heartbeat record (``jobs/ID/aNNNN/heartbeats/pNNNNN.json``): where it is, and its epochs so far."""

    rank: int
    epoch: int  # epochs done
    loss: float | None  # the last epoch's, and when it ended
    elapsed_s: float | None
    step: int  # steps done of the next epoch, of ``steps``
    steps: int
    epochs: NotRequired[list[list[float]]]  # [epoch, loss, elapsed_s] each; a status leaves them out
    invocation: int
    state: str
    at: float


#: Called after every epoch with (rank, epoch, mean loss, seconds since start).
EpochCallback = Callable[[int, int, float, float], None]
#: Called after every step with (rank, epochs done, steps done in the running epoch, steps per
#: epoch): it must cost next to nothing, so whatever it reports goes out at most every so often.
StepCallback = Callable[[int, int, int, int], None]

#: Within an epoch a rank records its steps at most this often: one put of the data store, not
#: a request on the channel, and no wait (the put goes out in the background).
STEPS_EVERY_S = 5.0
#: The epochs a record keeps: a follower polling every second or so never misses one.
HISTORY = 1000

P = ParamSpec("P")


class Heartbeat:
    """A rank's heartbeat: call it after an epoch (``EpochCallback``), and ``step`` after every step.

    With ``every_s``, a rank beats after its first epoch and then after an epoch that ends in a
    new ``every_s``-long slot since the attempt began: the ranks of a BSP job, in lockstep, beat
    after the same epoch, so a round waits for their beats once. ``final_epoch`` (the job's last)
    always beats, so a finished rank's record shows where it ended. The record's put and the cancel
    key's get are independent: they go out at once, and the beat returns when both are done (an
    epoch waits for one request's time, not two), so a failed put still fails the beat.

    A step's record goes out in the background at most every ``steps_every_s`` and checks no
    cancel (ranks at different steps would stop at different rounds, and the others wait for
    them); a failed put fails the next beat. ``continued``: this rank may have beaten before in
    this attempt (a Lambda continuation, or a retry): its record is read once, to keep its epochs.
    """

    def __init__(
        self,
        store: Channel,
        attempt: Attempt,
        *,
        invocation: int = 1,
        every_s: float = 0.0,
        final_epoch: int | None = None,
        clock: Callable[[], float] = time.time,
        steps_every_s: float = STEPS_EVERY_S,
        continued: bool = False,
    ) -> None:
        self.store, self.attempt, self.invocation = store, attempt, invocation
        self.every_s, self.final_epoch, self.clock, self.steps_every_s = every_s, final_epoch, clock, steps_every_s
        self._cancel = keys.job_cancel(attempt.job_id, attempt.number)
        self._last_slot: int | None = None
        self._epochs: list[list[float]] | None = None if continued else []
        self._at = (0, 0, 0)  # epochs done, steps done in the running epoch, steps per epoch
        self._last_put = clock()
        self._pending: Future[Any] | None = None

    def __call__(self, rank: int, epoch: int, loss: float, elapsed: float) -> None:
        epochs = self._history(rank)
        # A retried invocation may run an epoch again from an earlier checkpoint: keep the newest.
        kept = [e for e in epochs if e[0] < epoch][-(HISTORY - 1) :]
        epochs[:] = [*kept, [epoch, loss, elapsed]]
        self._at = (epoch, 0, self._at[2])
        if self.every_s > 0 and epoch != self.final_epoch:
            slot = math.floor((self.clock() - self.attempt.started_at) / self.every_s)
            if slot == self._last_slot:
                return
            self._last_slot = slot
        recorded = self._put(rank)
        try:
            cancelled = bool(self.store.get_many([self._cancel]))
        finally:
            recorded.result()
        if cancelled:
            raise JobCancelled(f"job {self.attempt.job_id} was cancelled")

    def step(self, rank: int, epoch: int, step: int, steps: int) -> None:
        self._at = (epoch, step, steps)
        if self._pending is not None:
            if not self._pending.done():
                return  # the last record is still on its way: no queue of them
            self._pending.result()  # raises what the put raised
            self._pending = None
        now = self.clock()
        if now - self._last_put < self.steps_every_s:
            return
        self._history(rank)
        self._pending = self._put(rank)

    def settle(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for a step's record still on its way: a Lambda sandbox is frozen once its
        invocation returns, and a put finished on a later thaw would put an old record over a newer one."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result(timeout=timeout_s)
            except Exception as exc:  # the run has ended either way; its record is only late
                log.warning("a heartbeat record was not written: %s", exc)

    def _put(self, rank: int) -> Future[Any]:
        self._last_put = self.clock()
        epochs = self._epochs or []
        epoch, step, steps = self._at
        last = epochs[-1] if epochs and epochs[-1][0] == epoch else None
        record: HeartbeatRecord = {
            "rank": rank,
            "epoch": epoch,
            "loss": last[1] if last else None,
            "elapsed_s": last[2] if last else None,
            "step": step,
            "steps": steps,
            "epochs": [list(e) for e in epochs],
            "invocation": self.invocation,
            "state": "running",
            "at": time.time(),
        }
        key = keys.worker_heartbeat(self.attempt.job_id, self.attempt.number, rank)
        # Compact: it may hold a thousand epochs, and goes out every second or so.
        return _RECORDER.submit(self.store.put, key, json.dumps(record, separators=(",", ":")).encode())

    def _history(self, rank: int) -> list[list[float]]:
        """This rank's epochs so far in the attempt: read once from its record when it may have one."""
        if self._epochs is None:
            self._epochs = []
            try:
                raw = self.store.get(keys.worker_heartbeat(self.attempt.job_id, self.attempt.number, rank))
                self._epochs = [list(e) for e in json.loads(raw).get("epochs", [])]
            except (KeyNotFound, ValueError, TypeError, AttributeError):
                pass  # none yet, or one from before records kept their epochs
        return self._epochs


def both(first: Callable[P, None], then: Callable[P, None]) -> Callable[P, None]:
    """One callback that calls ``first``, then ``then``."""

    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        first(*args, **kwargs)
        then(*args, **kwargs)

    return call


def at_most_every(seconds: float, report: StepCallback, clock: Callable[[], float] = time.monotonic) -> StepCallback:
    """A step callback that passes a step on to ``report`` at most once per ``seconds`` (the first at once)."""
    last = -math.inf

    def step(rank: int, epoch: int, done: int, steps: int) -> None:
        nonlocal last
        now = clock()
        if now - last >= seconds:
            last = now
            report(rank, epoch, done, steps)

    return step
