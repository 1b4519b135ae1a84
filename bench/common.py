"""What the benchmarks share: printing a Markdown table and writing it as CSV."""

from __future__ import annotations

import csv
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``fn`` over ``repeats`` calls, in milliseconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def report(name: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Path:
    """Print ``rows`` as a Markdown table (for the README) and write ``results/NAME.csv``."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.csv"
    with path.open("w", newline="") as out:
        csv.writer(out).writerows([header, *rows])
    return path
