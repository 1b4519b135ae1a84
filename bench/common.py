"""What the benchmarks share: printing a Markdown table and writing it as CSV."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

from lambdaml.calibrate.probing import median_time

RESULTS = Path(__file__).resolve().parent / "results"


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``fn`` over ``repeats`` calls, in milliseconds (the calibration's timer)."""
    return 1000 * median_time(fn, repeats)


def report(name: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Path:
    """Print ``rows`` as a Markdown table (for bench/RESULTS.md) and write ``results/NAME.csv``."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.csv"
    with path.open("w", newline="") as out:
        csv.writer(out).writerows([header, *rows])
    return path
