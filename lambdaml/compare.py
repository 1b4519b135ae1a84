"""Side-by-side comparison of finished runs: tables, and loss against time and dollars.

Any result record works (local FaaS, Lambda, iaas-local, an EC2 cluster), so a FaaS run
and its IaaS baseline read the same way. Ratios are against the first result given.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lambdaml.errors import ConfigError
from lambdaml.runtime.reports import JobResult

if TYPE_CHECKING:
    from rich.table import Table

_BREAKDOWN = ("load_s", "compute_s", "communicate_s", "wait_s")


def load_results(paths: Sequence[str | Path]) -> list[JobResult]:
    """Read result files; anything else is a one-line error naming the file."""
    results = []
    for path in map(Path, paths):
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such result file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not a JSON result file ({exc})") from None
        result = JobResult.from_json(data, f"{path}: not a LambdaML result")
        if not result.loss_curve:
            raise ConfigError(f"{path}: the result has an empty loss curve")
        results.append(result)
    return results


def label(result: JobResult) -> str:
    backend = result.backend
    transport = "gloo" if backend.startswith("iaas") else result.spec["channel"]["kind"]
    return f"{backend} {transport} W={len(result.workers)}"


@dataclass(frozen=True)
class Summary:
    """One run's row: wall time, per-epoch time, mean per-worker breakdown, cost, final loss,
    and its time per epoch and cost as multiples of the first run's (None where that cost nothing)."""

    label: str
    wall_s: float
    epoch_s: float
    breakdown: dict[str, float]  # the mean of each of _BREAKDOWN over the workers
    dollars: float
    loss: float
    accuracy: float | None
    time_ratio: float = 1.0
    cost_ratio: float | None = None


def summary(result: JobResult) -> Summary:
    curve = result.loss_curve
    breakdown = {k: statistics.mean(getattr(w.times, k) for w in result.workers) for k in _BREAKDOWN}
    return Summary(
        label=label(result),
        wall_s=result.wall_time_s,
        # Training time per epoch: a worker's clock starts before it loads its shard.
        epoch_s=(curve[-1].elapsed_s - breakdown["load_s"]) / len(curve),
        breakdown=breakdown,
        dollars=result.cost["total_dollars"],
        loss=curve[-1].loss,
        accuracy=result.test_accuracy,
    )


def summaries(results: Sequence[JobResult]) -> list[Summary]:
    """Every run's summary, with its ratios against the first run's."""
    rows = [summary(r) for r in results]
    base = rows[0]
    return [
        replace(
            row,
            time_ratio=row.epoch_s / base.epoch_s,
            cost_ratio=row.dollars / base.dollars if base.dollars else None,
        )
        for row in rows
    ]


def comparison_tables(results: Sequence[JobResult]) -> list[Table]:
    """Two tables, where the runs took their time and what they cost and reached, each fitting 80 columns."""
    from analytic_model.advisor import format_money, format_time
    from lambdaml.cli.output import new_table

    rows = summaries(results)
    times = new_table("time per run", ("run", "wall", "per epoch", "load", "compute", "comm", "wait"))
    outcome = new_table(
        f"cost and outcome per run (x: against {rows[0].label})",
        ("run", "cost", "time x", "cost x", "loss", "accuracy"),
    )
    for row in rows:
        times.add_row(
            row.label, *(format_time(s) for s in (row.wall_s, row.epoch_s, *(row.breakdown[k] for k in _BREAKDOWN)))
        )
        outcome.add_row(
            row.label,
            format_money(row.dollars),
            f"{row.time_ratio:.2f}",
            "-" if row.cost_ratio is None else f"{row.cost_ratio:.2f}",
            f"{row.loss:.5f}",
            "-" if row.accuracy is None else f"{row.accuracy:.4f}",
        )
    return [times, outcome]


def comparison_json(results: Sequence[JobResult]) -> list[dict[str, object]]:
    """The same figures as the tables, unrounded."""
    return [asdict(row) for row in summaries(results)]


def plot_comparison(results: Sequence[JobResult], path: str | Path) -> Path:
    """Loss against wall time and against dollars; cost accrues evenly over a run's time."""
    from analytic_model.advisor import pyplot

    plt = pyplot()
    figure, (by_time, by_cost) = plt.subplots(1, 2, figsize=(11, 4.2))
    for result in results:
        elapsed = [p.elapsed_s for p in result.loss_curve]
        losses = [p.loss for p in result.loss_curve]
        rate = result.cost["total_dollars"] / max(result.wall_time_s, 1e-9)
        by_time.plot(elapsed, losses, marker="o", label=label(result))
        by_cost.plot([t * rate for t in elapsed], losses, marker="o", label=label(result))
    by_time.set(xlabel="wall time (s)", ylabel="training loss", title="loss against time")
    by_cost.set(xlabel="cost (US$)", ylabel="training loss", title="loss against dollars")
    for axes in (by_time, by_cost):
        axes.grid(alpha=0.3)
    by_time.legend(fontsize="small")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
