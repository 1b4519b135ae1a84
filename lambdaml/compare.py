"""Side-by-side comparison of finished runs: a table, and loss against time and dollars.

Any result record works (local FaaS, Lambda, iaas-local, an EC2 cluster), so a FaaS run
and its IaaS baseline read the same way. Ratios are against the first result given.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from lambdaml.errors import ConfigError
from lambdaml.runtime.reports import JobResult

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
    """One run's row: wall time, per-epoch time, mean per-worker breakdown, cost, final loss."""

    label: str
    wall_s: float
    epoch_s: float
    breakdown: dict[str, float]  # the mean of each of _BREAKDOWN over the workers
    dollars: float
    loss: float
    accuracy: float | None


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


def comparison_table(results: Sequence[JobResult]) -> Table:
    rows = [summary(r) for r in results]
    base = rows[0]
    table = Table(title=f"runs compared (ratios against {base.label})", title_justify="left")
    columns = ["run", "wall s", "s/epoch", "load", "compute", "comm", "wait", "$", "time x", "cost x", "loss", "acc"]
    for column in columns:
        table.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        table.add_row(
            row.label,
            f"{row.wall_s:.1f}",
            f"{row.epoch_s:.2f}",
            *(f"{row.breakdown[k]:.2f}" for k in _BREAKDOWN),
            f"{row.dollars:.6f}",
            f"{row.epoch_s / base.epoch_s:.2f}",
            f"{row.dollars / base.dollars:.2f}" if base.dollars else "-",
            f"{row.loss:.5f}",
            "-" if row.accuracy is None else f"{row.accuracy:.4f}",
        )
    return table


def plot_comparison(results: Sequence[JobResult], path: str | Path) -> Path:
    """Loss against wall time and against dollars; cost accrues evenly over a run's time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
