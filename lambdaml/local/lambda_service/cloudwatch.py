"""Function logs shipped to CloudWatch Logs, where Lambda puts them.

Every line a sandbox prints, and the START/END/REPORT lines of each invocation, go to the
function's log group (its ``LoggingConfig``, else ``/aws/lambda/<name>``) in one stream per
sandbox, as Lambda writes them. A background thread batches lines into ``PutLogEvents``
calls, so a function's output never waits on the logs service; a failed call is logged
and its lines dropped, as the local log files keep them anyway.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import defaultdict
from typing import Any, TypedDict

from lambdaml import aws

log = logging.getLogger(__name__)

BATCH_EVENTS = 1000  # PutLogEvents takes up to 10,000 events and 1 MB; stay well inside both
BATCH_WAIT_S = 0.2  # how long the first line of a batch waits for company
CLOSE_S = 5.0  # longest wait at stop for the lines still queued

Event = tuple[str, str, int, str]  # group, stream, timestamp (ms), message


class LogEvent(TypedDict):
    """One event of PutLogEvents."""

    timestamp: int  # ms
    message: str


class LogShipper:
    """Queue log lines and put them to CloudWatch Logs in batches, from a thread of its own."""

    def __init__(self, endpoint_url: str | None, region: str) -> None:
        self._client: Any = aws.client("logs", endpoint_url=endpoint_url, region=region, max_attempts=2)
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._created: set[tuple[str, str]] = set()
        self._groups: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="lambda-logs", daemon=True)
        self._thread.start()

    def ship(self, group: str, stream: str, data: bytes) -> None:
        now_ms = int(time.time() * 1000)
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                self._queue.put((group, stream, now_ms, line))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(CLOSE_S)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, done = [first], False
            deadline = time.monotonic() + BATCH_WAIT_S
            while len(batch) < BATCH_EVENTS:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    done = True
                    break
                batch.append(item)
            self._put(batch)
            if done:
                return

    def _put(self, batch: list[Event]) -> None:
        streams: dict[tuple[str, str], list[LogEvent]] = defaultdict(list)
        for group, stream, timestamp, message in batch:
            streams[(group, stream)].append({"timestamp": timestamp, "message": message})
        for (group, stream), events in streams.items():
            try:
                self._ensure(group, stream)
                self._client.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
            except Exception as exc:  # botocore's errors, or moto gone at stop: the log files still have them
                log.warning("cannot put %d log events to %s: %s", len(events), group, exc)

    def _ensure(self, group: str, stream: str) -> None:
        if (group, stream) in self._created:
            return
        exists = self._client.exceptions.ResourceAlreadyExistsException
        if group not in self._groups:
            with contextlib.suppress(exists):
                self._client.create_log_group(logGroupName=group)
            self._groups.add(group)
        with contextlib.suppress(exists):
            self._client.create_log_stream(logGroupName=group, logStreamName=stream)
        self._created.add((group, stream))
