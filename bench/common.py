"""What the benchmarks share: the BSP job they time, printing a Markdown table and writing it as CSV."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lambdaml.calibrate.probing import median_time
from lambdaml.config import ChannelSpec, JobSpec, StorageSpec, parse_job

RESULTS = Path(__file__).resolve().parent / "results"


def bsp_job(
    name: str,
    workers: int,
    dataset: str,
    storage: StorageSpec,
    channel: ChannelSpec | dict[str, Any],
    model: str,
    algorithm: dict[str, Any],
    pattern: str = "allreduce",
    **fields: Any,
) -> JobSpec:
    """A BSP job a benchmark times; its rounds may wait up to 300 s (a loaded machine is slow, not broken)."""
    if isinstance(channel, ChannelSpec):
        channel = channel.model_dump(mode="json", exclude_none=True)
    return parse_job(
        {
            "name": name,
            "workers": workers,
            "dataset": dataset,
            "storage": storage.model_dump(mode="json"),
            "channel": channel,
            "model": {"name": model},
            "algorithm": algorithm,
            "sync": {"protocol": "bsp", "pattern": pattern, "timeout_s": 300},
            **fields,
        }
    )


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
