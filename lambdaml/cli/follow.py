"""Following a job as it runs: its worker lines until it ends, and how a ``status --watch`` ends."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from lambdaml.cli.output import console, print_json_line
from lambdaml.errors import ConfigError

#: ``status --watch``'s exit status for a job that ended other than succeeded.
EXIT_ENDED_BADLY = 1


class JobLine(Protocol):
    """One line a job's worker logged, from a stack's logs or this machine's files."""

    @property
    def at_ms(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def message(self) -> str: ...


def follow_lines(
    args: argparse.Namespace,
    new_lines: Callable[[], Sequence[JobLine]],
    state_now: Callable[[], str | None],
    *,
    limit: float,
    before_first: Callable[[], None] | None = None,
) -> int:
    """Print a job's lines (``at_ms``, ``rank``, ``message``) as ``logs`` does; with --follow, until it ends.

    Returns how many were printed. Gives up after ``limit`` seconds without a new line.
    """
    from lambdaml.runtime import records

    printed = 0
    last_change = time.monotonic()
    while True:
        state = state_now()  # before the lines: the last look has all up to the job's end
        new = new_lines()
        for line in new:
            if args.rank is not None and line.rank != args.rank:
                continue
            if printed == 0 and before_first is not None:
                before_first()
            printed += 1
            if args.output == "json":
                print_json_line({"at_ms": line.at_ms, "rank": line.rank, "message": line.message})
            else:
                when = time.strftime("%H:%M:%S", time.gmtime(line.at_ms / 1000)) + f".{line.at_ms % 1000:03d}"
                console.print(f"{when} rank {line.rank:>3}  {line.message}")
        if not args.follow or state in records.ENDED:
            return printed
        if new:
            last_change = time.monotonic()
        elif time.monotonic() - last_change > limit:
            raise ConfigError(f"job {args.job_id}: no new log lines for {limit:g}s (state: {state})")
        time.sleep(1.0)
