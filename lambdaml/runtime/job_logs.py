"""The lines the workers of a job run on this machine log, kept per rank in ``LAMBDAML_HOME/jobs/ID/``.

A Lambda worker's lines go to CloudWatch Logs; a worker here writes its own to
``rank-R.jsonl`` in the job's folder (``machine_jobs``), one JSON object a line: when (ms since
the epoch), the attempt, the level and the message, and for an epoch's line the epoch, its
loss and time, so ``lambdaml attach`` can follow a job that another terminal runs. Each rank
appends to its own file (every attempt of the job to the same one), so no two processes
write one file; ``lambdaml logs`` merges them by time.

A worker process keeps every line the ``lambdaml`` loggers log at INFO and above, and any
warning; a worker thread (the in-memory channel's, inside the command's own process) keeps
its thread's lines at the level the command logs at. Warnings still reach stderr as before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lambdaml.runtime.machine_jobs import MachineRegistry, warn_once
from lambdaml.runtime.records import Attempt

log = logging.getLogger(__name__)

#: The first line of every worker's log, as a Lambda worker's first line begins (``JOB_LOG_MARK``).
FIRST_LINE = "lambdaml job {job_id} rank {rank} attempt {attempt}"


def rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank}.jsonl"


@dataclass(frozen=True)
class WorkerLine:
    """One line a worker logged: when (ms since the epoch), which rank and attempt, and the line."""

    at_ms: int
    rank: int
    attempt: int
    level: str
    message: str
    event_id: str  # the rank and the line's place in its file: unique within the job
    epoch: dict[str, float] | None = None  # an epoch's line: epoch, loss, elapsed_s


class WorkerLog:
    """A worker's log file, open while it runs: its logged lines, its epochs, and its own lines."""

    def __init__(self, out: IO[str] | None, attempt: Attempt, rank: int, epochs: int) -> None:
        self.out, self.attempt, self.rank, self.epochs = out, attempt, rank, epochs
        self._lock = threading.Lock()
        self._handlers: list[tuple[logging.Logger, logging.Handler]] = []
        self._levels: list[tuple[logging.Logger, int]] = []

    @classmethod
    def open(cls, attempt: Attempt, rank: int, *, epochs: int, whole_process: bool) -> WorkerLog:
        """Start keeping a worker's lines: every line of this process (``whole_process``), or of this thread."""
        folder = MachineRegistry().folder(attempt.job_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            out: IO[str] | None = rank_file(folder, rank).open("a", buffering=1, encoding="utf-8")
        except OSError as exc:  # the job goes on; ``lambdaml logs`` will have nothing of it
            warn_once(f"rank {rank}'s lines are not kept ({exc})")
            out = None
        worker_log = cls(out, attempt, rank, epochs)
        if out is not None:
            worker_log._capture(whole_process)
            worker_log.line(FIRST_LINE.format(job_id=attempt.job_id, rank=rank, attempt=attempt.number))
        return worker_log

    def _capture(self, whole_process: bool) -> None:
        handler = _Handler(self)
        root, ours = logging.getLogger(), logging.getLogger("lambdaml")
        if whole_process:
            # The worker's own process: its INFO lines are kept; warnings still go to stderr, as
            # Python's last-resort handler printed them before this handler was there.
            handler.setLevel(logging.INFO)
            if not root.handlers:
                stderr = logging.StreamHandler(sys.stderr)
                stderr.setLevel(logging.WARNING)
                self._handlers.append((root, stderr))
                root.addHandler(stderr)
            if ours.getEffectiveLevel() > logging.INFO:
                self._levels.append((ours, ours.level))
                ours.setLevel(logging.INFO)
        else:
            thread = threading.get_ident()
            handler.addFilter(lambda record: record.thread == thread)
        self._handlers.append((root, handler))
        root.addHandler(handler)

    def line(self, message: str, level: str = "INFO", **extra: Any) -> None:
        """Keep one line (from a handler, or the worker's own: its first, its epochs, its end)."""
        if self.out is None:
            return
        entry = {"at_ms": int(time.time() * 1000), "attempt": self.attempt.number, "level": level, "message": message}
        text = json.dumps({**entry, **extra}) + "\n"
        # One write of one line, to a file only this rank appends to; a full disk, or a logger
        # writing after the close, costs the line, never the job.
        with self._lock, contextlib.suppress(OSError, ValueError):
            self.out.write(text)

    def epoch(self, epoch: int, loss: float, elapsed_s: float) -> None:
        self.line(
            f"epoch {epoch}/{self.epochs} loss {loss:.5f} {elapsed_s:.2f}s",
            epoch={"epoch": epoch, "loss": loss, "elapsed_s": elapsed_s},
        )

    def close(self) -> None:
        for logger, handler in self._handlers:
            logger.removeHandler(handler)
        for logger, level in self._levels:
            logger.setLevel(level)
        self._handlers, self._levels = [], []
        if self.out is not None:
            with self._lock:
                self.out.close()


class _Handler(logging.Handler):
    def __init__(self, worker_log: WorkerLog) -> None:
        super().__init__()
        self.worker_log = worker_log
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.worker_log.line(self.format(record), level=record.levelname)
        except Exception:  # a handler never raises into the worker
            self.handleError(record)


class LogReader:
    """A job's worker lines as they are appended: each call returns those it has not returned yet."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._offsets: dict[Path, int] = {}
        self._counts: dict[Path, int] = {}

    def new_lines(self) -> list[WorkerLine]:
        """The complete lines written since the last call, every rank's, by time (a line half-written waits)."""
        found: list[WorkerLine] = []
        for path in sorted(self.folder.glob("rank-*.jsonl")):
            rank_text = path.stem.removeprefix("rank-")
            if not rank_text.isdigit():
                continue
            rank = int(rank_text)
            with path.open("rb") as source:
                source.seek(self._offsets.get(path, 0))
                chunk = source.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            for raw in complete.splitlines():
                count = self._counts[path] = self._counts.get(path, 0) + 1
                line = _parse(raw, rank, f"{rank}:{count}")
                if line is not None:
                    found.append(line)
        return sorted(found, key=lambda line: (line.at_ms, line.rank))


def _parse(raw: bytes, rank: int, event_id: str) -> WorkerLine | None:
    """One kept line; None for one that is not (a torn write of a worker killed mid-line)."""
    try:
        data = json.loads(raw)
        epoch = data.get("epoch")
        return WorkerLine(
            at_ms=int(data["at_ms"]),
            rank=rank,
            attempt=int(data.get("attempt", 1)),
            level=str(data.get("level", "INFO")),
            message=str(data["message"]),
            event_id=event_id,
            epoch={k: float(epoch[k]) for k in ("epoch", "loss", "elapsed_s")} if isinstance(epoch, dict) else None,
        )
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
