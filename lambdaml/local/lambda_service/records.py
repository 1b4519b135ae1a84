"""What the local Lambda service writes down: one record per attempt, and each function's log.

Records (cold or warm, duration, billed duration, memory, status) are kept in memory and as
JSON lines in ``invocations.jsonl``; handler output goes to ``<function>.log`` with the
START/END/REPORT lines of CloudWatch's format, and to CloudWatch Logs when a shipper is set.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import IO

from lambdaml.local.lambda_service.cloudwatch import LogShipper
from lambdaml.local.lambda_service.memory import peak_rss_mb
from lambdaml.local.lambda_service.models import Attempt, InvocationRecord
from lambdaml.local.lambda_service.sandboxes import Sandbox


class InvocationLog:
    """The invocation records and the function log files of one service run (``open`` to ``close``)."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping  # once set, no new log file is opened
        self._log_dir: Path | None = None
        self._files_lock = threading.Lock()
        self._fn_logs: dict[str, IO[bytes]] = {}
        self._records: list[InvocationRecord] = []
        self._records_lock = threading.Lock()
        self._jsonl: IO[str] | None = None
        self.shipper: LogShipper | None = None

    def open(self, log_dir: Path, jsonl_path: Path) -> None:
        self._log_dir = log_dir
        self._jsonl = jsonl_path.open("a", encoding="utf-8")

    def close(self) -> None:
        with self._files_lock:
            for f in self._fn_logs.values():
                f.close()
            self._fn_logs.clear()
        with self._records_lock:
            if self._jsonl is not None:
                self._jsonl.close()
                self._jsonl = None

    def invocations(self, function: str | None = None) -> list[InvocationRecord]:
        with self._records_lock:
            return [r for r in self._records if function is None or r.function == function]

    def record(self, attempt: Attempt, sandbox: Sandbox | None) -> InvocationRecord:
        """Keep the record of a settled attempt and end its log lines with END and REPORT."""
        now_wall, now_mono = time.time(), time.monotonic()
        end_mono = attempt.end_mono or now_mono
        duration_ms = (end_mono - attempt.start_mono) * 1000.0 if attempt.delivered else 0.0
        init_ms: float | None = None
        if attempt.cold and sandbox is not None and sandbox.spawned_mono:
            ready = sandbox.ready_mono if sandbox.ready_mono is not None else end_mono
            init_ms = round(max(0.0, ready - sandbox.spawned_mono) * 1000.0, 2)
        start = attempt.start_wall if attempt.delivered else attempt.assigned_wall
        record = InvocationRecord(
            request_id=attempt.request_id,
            function=attempt.fn.name,
            invocation_type=attempt.invocation_type,
            attempt=attempt.attempt,
            pid=sandbox.pid if sandbox is not None else None,
            cold=attempt.cold,
            start=start,
            end=now_wall - (now_mono - end_mono),
            duration_ms=round(duration_ms, 2),
            init_duration_ms=init_ms,
            billed_duration_ms=math.ceil(duration_ms + (init_ms or 0.0)),
            memory_mb=attempt.fn.memory_mb,
            max_memory_used_mb=peak_rss_mb(sandbox.pid if sandbox is not None else None),
            status=attempt.status,
            error_type=attempt.error_type,
        )
        with self._records_lock:
            self._records.append(record)
            if self._jsonl is not None:
                self._jsonl.write(json.dumps(record.to_dict()) + "\n")
                self._jsonl.flush()
        report = (
            f"REPORT RequestId: {record.request_id}\tDuration: {record.duration_ms:.2f} ms\t"
            f"Billed Duration: {record.billed_duration_ms} ms\tMemory Size: {record.memory_mb} MB\t"
            f"Max Memory Used: {record.max_memory_used_mb or 0} MB"
        )
        if init_ms is not None:
            report += f"\tInit Duration: {init_ms:.2f} ms"
        if record.status != "success":
            report += f"\tStatus: {record.status}"
        lines = f"END RequestId: {record.request_id}\n{report}\n".encode()
        if attempt.tail is not None:
            attempt.tail.append(lines)
        if sandbox is not None:
            self.write(sandbox, lines)
        else:  # it never got a sandbox (a start error): its log file still says so
            self._append(attempt.fn.name, lines)
        return record

    def write(self, sandbox: Sandbox, data: bytes) -> None:
        """A sandbox's log lines: to its function's log file, and to CloudWatch Logs when shipping."""
        self._append(sandbox.fn.name, data)
        if self.shipper is not None:
            self.shipper.ship(sandbox.fn.log_group_name, sandbox.log_stream, data)

    def _append(self, function: str, data: bytes) -> None:
        """Append to the function's log file (opened on first use, while the service runs)."""
        with self._files_lock:
            f = self._fn_logs.get(function)
            if f is None and self._log_dir is not None and not self._stopping.is_set():
                f = self._fn_logs[function] = (self._log_dir / f"{function}.log").open("ab")
            if f is not None:
                f.write(data)
                f.flush()
