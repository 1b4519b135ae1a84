"""Side-by-side comparison of finished runs: tables, and loss against time and dollars.

Any result record works (local FaaS, Lambda, iaas-local, an EC2 cluster), so a FaaS run
and its IaaS baseline read the same way. Ratios are against the first result given: of wall
time and billed cost, what a user waits for and pays. Runs that recorded the cost model's
prediction get a third table: the measured time and cost over the predicted, and whether each
fell in the predicted range.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lambdaml.cli.output import new_table
from lambdaml.errors import ConfigError, brief
from lambdaml.runtime.prediction_record import prediction_error
from lambdaml.runtime.reports import JobResult, read_result_file

if TYPE_CHECKING:
    from rich.table import Table

_BREAKDOWN = ("load_s", "compute_s", "communicate_s", "wait_s")


def load_results(paths: Sequence[str | Path]) -> list[JobResult]:
    """Read result files (bounded, typed: ``read_result_file``) and check the parts a comparison
    reads; anything else is a one-line error naming the file and the part."""
    results = []
    for path in map(Path, paths):
        result = read_result_file(path)
        check_comparable(result, path)
        results.append(result)
    return results


def check_comparable(result: JobResult, path: Path) -> None:
    """The parts of a result beyond its typed fields that the tables and the plot read."""
    if not result.loss_curve:
        raise ConfigError(f"{path}: the result has an empty loss curve")
    if not result.workers:
        raise ConfigError(f"{path}: the result lists no workers")
    if not result.backend.startswith("iaas"):  # a run over a channel names its kind
        channel = result.spec.get("channel")
        if not isinstance(channel, dict) or not isinstance(channel.get("kind"), str):
            raise ConfigError(f"{path}: the result's spec lacks channel.kind (the channel the run used)")
    if not isinstance(result.spec.get("sync", {}), dict | None):
        raise ConfigError(f"{path}: the result's spec.sync must be an object, got {brief(result.spec['sync'])}")
    dollars = result.cost.get("total_dollars")
    if isinstance(dollars, bool) or not isinstance(dollars, int | float) or not math.isfinite(dollars) or dollars < 0:
        raise ConfigError(f"{path}: the result's cost lacks total_dollars (a number of at least 0)")


#: How a label names a communication pattern (as the advisor's table does).
_PATTERN_SHORT = {"allreduce": "AR", "scatter_reduce": "SR", "scatter_reduce_2d": "SR2D"}


def _transport(result: JobResult) -> str:
    return "gloo" if result.backend.startswith("iaas") else str(result.spec["channel"]["kind"])


def _pattern(result: JobResult) -> str | None:
    """The collective pattern of a run over a channel (gloo's collectives are its own: None)."""
    if result.backend.startswith("iaas"):
        return None
    pattern = result.pattern or str((result.spec.get("sync") or {}).get("pattern") or "-")
    return _PATTERN_SHORT.get(pattern, pattern)


def _epochs(result: JobResult) -> int:
    return result.loss_curve[-1].epoch


def labels(results: Sequence[JobResult]) -> list[str]:
    """A label per run, never two alike: backend, transport and W; the pattern (of runs over a
    channel) and the epoch count where the runs differ in them; and the job id's tail (with the
    attempt, or the run's place in the list, where that is not enough)."""
    patterns = len({_pattern(r) for r in results} - {None}) > 1
    epochs = len({_epochs(r) for r in results}) > 1
    names = []
    for result in results:
        parts = [result.backend, _transport(result)]
        pattern = _pattern(result)
        if patterns and pattern is not None:
            parts.append(pattern)
        parts.append(f"W={len(result.workers)}")
        if epochs:
            parts.append(f"{_epochs(result)}ep")
        parts.append(result.job_id.rsplit("-", 1)[-1])
        names.append(" ".join(parts))
    for more in ([f"#{r.attempt}" for r in results], [f"({i + 1})" for i in range(len(results))]):
        if len(set(names)) == len(names):
            break
        names = [f"{name} {tail}" if names.count(name) > 1 else name for name, tail in zip(names, more, strict=True)]
    return names


@dataclass(frozen=True)
class Summary:
    """One run's row: wall time, training time per epoch, mean per-worker breakdown, billed cost,
    final loss, and its wall time and cost as multiples of the first run's (None where that cost nothing)."""

    label: str
    wall_s: float
    epoch_s: float
    breakdown: dict[str, float]  # the mean of each of _BREAKDOWN over the workers
    dollars: float
    loss: float
    accuracy: float | None
    wall_ratio: float = 1.0
    cost_ratio: float | None = None
    # Against the prediction the run recorded (None: it has none): measured over predicted.
    predicted_s: float | None = None
    time_vs_predicted: float | None = None
    cost_vs_predicted: float | None = None
    time_in_predicted_range: bool | None = None


def summary(result: JobResult, label: str | None = None) -> Summary:
    """One run's row; ``label`` as ``labels`` names it among the runs compared (alone, by default)."""
    curve = result.loss_curve
    breakdown = {k: statistics.mean(getattr(w.times, k) for w in result.workers) for k in _BREAKDOWN}
    error = prediction_error(result)
    return Summary(
        label=label or labels([result])[0],
        wall_s=result.wall_time_s,
        # Training time per epoch: a worker's clock starts before it loads its shard.
        epoch_s=(curve[-1].elapsed_s - breakdown["load_s"]) / len(curve),
        breakdown=breakdown,
        dollars=result.cost["total_dollars"],
        loss=curve[-1].loss,
        accuracy=result.test_accuracy,
        predicted_s=None if result.prediction is None else result.prediction.time_s,
        time_vs_predicted=None if error is None else error.time_ratio,
        cost_vs_predicted=None if error is None else error.cost_ratio,
        time_in_predicted_range=None if error is None else error.time_in_range,
    )


def summaries(results: Sequence[JobResult]) -> list[Summary]:
    """Every run's summary, with its wall time and billed cost as multiples of the first run's:
    what a user waits for and pays, start-up included."""
    rows = [summary(r, name) for r, name in zip(results, labels(results), strict=True)]
    base = rows[0]
    return [
        replace(
            row,
            wall_ratio=row.wall_s / base.wall_s if base.wall_s else 1.0,
            cost_ratio=row.dollars / base.dollars if base.dollars else None,
        )
        for row in rows
    ]


def comparison_tables(results: Sequence[JobResult]) -> list[Table]:
    """Two tables, where the runs took their time and what they cost and reached, each fitting 80 columns."""
    from analytic_model.advisor import format_money, format_time

    rows = summaries(results)
    times = new_table("time per run", ("run", "wall", "per epoch", "load", "compute", "comm", "wait"))
    outcome = new_table(
        "cost and outcome per run (x: wall time and cost over the first run's)",
        ("run", "cost", "wall x", "cost x", "loss", "accuracy"),
    )
    for row in rows:
        times.add_row(
            row.label, *(format_time(s) for s in (row.wall_s, row.epoch_s, *(row.breakdown[k] for k in _BREAKDOWN)))
        )
        outcome.add_row(
            row.label,
            format_money(row.dollars),
            f"{row.wall_ratio:.2f}",
            "-" if row.cost_ratio is None else f"{row.cost_ratio:.2f}",
            f"{row.loss:.5f}",
            "-" if row.accuracy is None else f"{row.accuracy:.4f}",
        )
    if any(r.prediction is not None for r in results):
        return [times, outcome, prediction_table(results, rows)]
    return [times, outcome]


def prediction_table(results: Sequence[JobResult], rows: Sequence[Summary]) -> Table:
    """Each run against the cost model's prediction it recorded: a run without one says so."""
    from analytic_model.advisor import format_money, format_time

    table = new_table(
        "measured against predicted (x: measured over predicted)",
        ("run", "predicted", "range", "time x", "cost x", "in range"),
    )
    for result, row in zip(results, rows, strict=True):
        p, error = result.prediction, prediction_error(result)
        # What fell within its predicted range: time, cost, both or neither.
        if p is None or error is None:
            table.add_row(row.label, "no prediction", "-", "-", "-", "-")
            continue
        table.add_row(
            row.label,
            f"{format_time(p.time_s)} {format_money(p.cost)}",
            f"{format_time(p.time_low_s)}-{format_time(p.time_high_s)}",
            f"{error.time_ratio:.2f}",
            "-" if error.cost_ratio is None else f"{error.cost_ratio:.2f}",
            ", ".join(n for n, ok in (("time", error.time_in_range), ("cost", error.cost_in_range)) if ok) or "neither",
        )
    return table


def comparison_json(results: Sequence[JobResult]) -> list[dict[str, object]]:
    """The same figures as the tables, unrounded."""
    return [asdict(row) for row in summaries(results)]


@dataclass(frozen=True)
class Series:
    """One run's curve as the plot draws it: the loss after each epoch, at the time since the job
    started and at the dollars spent by then; its last point is the run's end (wall time, billed cost)."""

    label: str
    seconds: list[float]
    dollars: list[float]
    losses: list[float]


def series(result: JobResult, label: str) -> Series:
    """The loss curve on the job's clock: a worker's clock starts after the job's start-up (process
    or function start, torchrun's rendezvous), so every epoch moves by the time the slowest worker
    was not yet running; the run ends at its wall time with its last loss. Cost accrues evenly over
    the wall time, so the end is the billed total (an EC2 minimum included)."""
    wall, total = result.wall_time_s, result.cost["total_dollars"]
    started = max(0.0, wall - max(w.times.total_s for w in result.workers))
    seconds = [min(wall, started + p.elapsed_s) for p in result.loss_curve]
    losses = [p.loss for p in result.loss_curve]
    if seconds[-1] < wall:
        seconds.append(wall)
        losses.append(losses[-1])
    rate = total / wall if wall > 0 else 0.0
    dollars = [t * rate for t in seconds]
    dollars[-1] = total
    return Series(label, seconds, dollars, losses)


def plot_series(results: Sequence[JobResult]) -> list[Series]:
    """What ``plot_comparison`` draws: each run's series, labelled as the tables label it."""
    return [series(r, name) for r, name in zip(results, labels(results), strict=True)]


def plot_comparison(results: Sequence[JobResult], path: str | Path) -> Path:
    """Loss against wall time and against dollars, each run ending at its wall time and billed cost."""
    from analytic_model.advisor import pyplot

    plt = pyplot()
    figure, (by_time, by_cost) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in plot_series(results):
        by_time.plot(run.seconds, run.losses, marker="o", label=run.label)
        by_cost.plot(run.dollars, run.losses, marker="o", label=run.label)
    by_time.set(xlabel="wall time since the job started (s)", ylabel="training loss", title="loss against time")
    by_cost.set(xlabel="billed cost (US$)", ylabel="training loss", title="loss against dollars")
    for axes in (by_time, by_cost):
        axes.grid(alpha=0.3)
    by_time.legend(fontsize="small")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
