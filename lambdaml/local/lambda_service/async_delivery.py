"""Async (``Event``) invocations: the queue, retries with AWS's backoff, the on-failure destination.

An Event invocation keeps its request id across retries (AWS does too); after
``1 + max_retry_attempts`` failed attempts an AWS-shaped invocation record goes to the
``on_failure`` destination (a callable, or another function invoked asynchronously).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from lambdaml.errors import LambdaMLError
from lambdaml.local.lambda_service.execution import Executor
from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.models import (
    IDLE_WAIT_S,
    LATEST,
    Attempt,
    FailureRecord,
    FunctionConfig,
    Stopping,
)
from lambdaml.local.lambda_service.responses import json_bytes, parse_json

log = logging.getLogger(__name__)

_THROTTLE_WAIT_S = 5.0  # an Event invocation at the concurrency limit waits in slices of this


@dataclass(order=True)
class _AsyncJob:
    due: float
    seq: int
    request_id: str = field(compare=False)
    fn: FunctionConfig = field(compare=False)
    payload: bytes = field(compare=False)
    attempts: int = field(default=0, compare=False)


class AsyncDelivery:
    """Queued Event invocations, due now or at a retry; ``dispatch`` (a thread) runs each when due."""

    def __init__(
        self,
        functions: Functions,
        executor: Executor,
        function_arn: Callable[[str], str],
        retry_delays_s: Sequence[float],
        stopping: threading.Event,
    ) -> None:
        self._functions = functions
        self._executor = executor
        self._function_arn = function_arn
        self._retry_delays = tuple(retry_delays_s)
        self._stopping = stopping
        self._cond = threading.Condition()
        self._heap: list[_AsyncJob] = []
        self._seq = itertools.count()
        self._outstanding = 0  # Event invocations queued, waiting to retry or running

    def enqueue(self, fn: FunctionConfig, payload: bytes, request_id: str) -> None:
        with self._cond:
            if self._stopping.is_set():
                raise Stopping
            self._outstanding += 1
            heapq.heappush(self._heap, _AsyncJob(time.monotonic(), next(self._seq), request_id, fn, payload))
            self._cond.notify_all()

    def stop(self) -> None:
        """Drop what is queued (the service is stopping) and wake the dispatcher to end."""
        with self._cond:
            dropped = len(self._heap)
            self._heap.clear()
            self._cond.notify_all()
        if dropped:
            log.warning("dropping %d queued Event invocations at stop", dropped)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no Event invocation is queued, retrying or running; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._outstanding > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def dispatch(self) -> None:
        """Start every due Event job (first tries and retries) on a thread of its own."""
        while True:
            with self._cond:
                while not self._stopping.is_set():
                    now = time.monotonic()
                    if self._heap and self._heap[0].due <= now:
                        job = heapq.heappop(self._heap)
                        break
                    wait = self._heap[0].due - now if self._heap else IDLE_WAIT_S
                    self._cond.wait(wait)
                else:
                    return
            threading.Thread(target=self._run, args=(job,), name=f"event-{job.request_id[:8]}", daemon=True).start()

    def _run(self, job: _AsyncJob) -> None:
        done = True
        try:
            job.attempts += 1
            attempt = Attempt(job.request_id, job.fn, job.payload, "Event", job.attempts)
            while not self._executor.execute(attempt, wait_s=_THROTTLE_WAIT_S):
                if self._stopping.is_set():
                    return
            if not attempt.failed:
                return
            if job.attempts <= job.fn.max_retry_attempts:
                delay = self._retry_delays[min(job.attempts - 1, len(self._retry_delays) - 1)]
                log.info("%s %s failed (%s); retry in %gs", job.fn.name, job.request_id, attempt.status, delay)
                with self._cond:
                    if not self._stopping.is_set():
                        job.due, job.seq = time.monotonic() + delay, next(self._seq)
                        heapq.heappush(self._heap, job)
                        self._cond.notify_all()
                        done = False
                return
            self._deliver_failure(job, attempt)
        except Stopping:
            return
        except LambdaMLError:
            log.exception("Event invocation %s of %s failed in the service", job.request_id, job.fn.name)
        finally:
            if done:
                with self._cond:
                    self._outstanding -= 1
                    self._cond.notify_all()

    def _deliver_failure(self, job: _AsyncJob, attempt: Attempt) -> None:
        """Send AWS's invocation record to the on-failure destination (or log the dropped event)."""
        record: FailureRecord = {
            "version": "1.0",
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "requestContext": {
                "requestId": job.request_id,
                "functionArn": f"{self._function_arn(job.fn.name)}:{LATEST}",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": job.attempts,
            },
            "requestPayload": parse_json(job.payload),
            "responseContext": {"statusCode": 200, "executedVersion": LATEST, "functionError": "Unhandled"},
            "responsePayload": parse_json(attempt.result),
        }
        destination = job.fn.on_failure
        if destination is None:
            log.warning("%s %s failed %d times; no on-failure destination", job.fn.name, job.request_id, job.attempts)
        elif isinstance(destination, str):
            self.enqueue(self._functions[destination], json_bytes(record), str(uuid.uuid4()))
        else:
            try:
                destination(record)
            except Exception:  # a user callback: its failure must not take the dispatcher down
                log.exception("on-failure callback of %s raised", job.fn.name)
