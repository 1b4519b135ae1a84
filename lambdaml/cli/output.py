"""What the ``lambdaml`` command prints: the consoles, one-line errors, and the result and table printers.

Markup and emoji codes are off everywhere: messages carry job-file keys, paths, bucket names and
servers' errors ("[/x]" would crash rich's markup parser, "[blink]" vanish, ":x:" turn into an
emoji). The few intended styles are Text objects; a Table's str cells follow the console's markup
setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from lambdaml.data.shards import Manifest
    from lambdaml.runtime.reports import JobResult


def literal_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that prints every message as it is: no markup, emoji codes or highlighting."""
    return Console(stderr=stderr, width=width, highlight=False, markup=False, emoji=False)


console = literal_console()
errors = literal_console(stderr=True)
#: What a command says while it works (a job's epochs, calibration steps), as against its result.
progress = literal_console()


def configure(*, quiet: bool, json: bool) -> None:
    """Set up one command's progress lines: none under -q; on stderr while stdout carries JSON."""
    progress.quiet, progress.stderr = quiet, json


def one_line(message: str) -> str:
    """A message as the one line a user error gets: some (botocore's, for one) span several."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def _accuracy_of(result: JobResult) -> str:
    """What an accuracy is of: the class count, and what always answering the most common class scores."""
    classes, majority = result.classes, result.majority_accuracy
    if not classes:
        return ""
    return f" over {classes} classes" + (f" (most common class alone: {majority:.4f})" if majority is not None else "")


def print_result(result: JobResult) -> None:
    from rich.table import Table

    table = Table(title="time per worker (s)", title_justify="left")
    for column in ("rank", "load", "compute", "communicate", "wait", "total", "requests", "MB sent", "KB sent/round"):
        table.add_column(column, justify="right")
    for w in result.workers:
        t, channel = w.times, w.channel
        per_round = channel.per_round.bytes_sent_per_round if channel.per_round else 0.0
        table.add_row(
            str(w.rank),
            *(f"{s:.2f}" for s in (t.load_s, t.compute_s, t.communicate_s, t.wait_s, t.total_s)),
            str(int(channel.requests)),
            f"{channel.bytes_sent / 1e6:.2f}",
            f"{per_round / 1e3:.1f}",
        )
    console.print(table)
    if result.test_accuracy is not None:
        console.print(
            f"test accuracy {result.test_accuracy:.4f}{_accuracy_of(result)}  test loss {result.test_loss:.5f}"
        )
    console.print(f"job {result.job_id} finished in {result.wall_time_s:.1f}s; model at {result.model_uri}")
    cost = result.cost
    if cost and "ec2" in cost:
        ec2 = cost["ec2"]
        console.print(
            f"cost ${cost['total_dollars']:.6f}: {ec2['instances']} x {ec2['instance_type']} for "
            f"{ec2['seconds_billed']} s at ${ec2['dollars_per_hour']}/h; prices as of {cost['prices_checked']}"
        )
    elif cost:
        lam, channel = cost["lambda"], cost["channel"]
        console.print(
            f"cost ${cost['total_dollars']:.6f}: Lambda {lam['invocations']} invocations "
            f"({lam['cold_starts']} cold), {lam['gb_seconds']:.2f} GB-s "
            f"(${lam['dollars']:.6f}); {channel['kind']} {int(channel['requests'])} requests "
            f"(${channel['dollars']:.6f}); prices as of {cost['prices_checked']}"
        )
    if result.result_path is not None:
        console.print(f"result: {result.result_path}")


def print_dataset(manifest: Manifest, bucket: str) -> None:
    """The one line ``data prepare`` (and the demo) ends with: what was written, and where."""
    console.print(
        f"dataset {manifest.name} ({manifest.format}): {manifest.train_rows} training rows in {manifest.shards} "
        f"shards, {manifest.test_rows} test rows, {manifest.n_features} features, {manifest.n_classes} classes "
        f"-> s3://{bucket}/datasets/{manifest.name}/ (version {manifest.dataset_version})"
    )


def _print_profile(measured: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"channels ({measured['target']})", title_justify="left")
    for column in ("channel", "put ms", "get ms", "put MB/s", "get MB/s", "store ms/request"):
        table.add_column(column, justify="right")
    for kind, c in sorted(measured["channels"].items()):
        table.add_row(
            kind,
            f"{c['latency_put_s'] * 1e3:.2f}",
            f"{c['latency_get_s'] * 1e3:.2f}",
            f"{c['bandwidth_put_Bps'] / 1e6:.0f}",
            f"{c['bandwidth_get_Bps'] / 1e6:.0f}",
            f"{c['server_get_s'] * 1e3:.3f}",
        )
    console.print(table)
    for key, m in measured.get("compute", {}).get("measured", {}).items():
        console.print(
            f"compute {key}: {m['per_sample_s'] * 1e6:.3f} us per sample, {m['per_step_s'] * 1e6:.0f} us per step",
            soft_wrap=True,
        )
    faas = measured.get("faas", {})
    cores = faas.get("shared_cores")
    console.print(
        f"worker start-up {faas['cold_start_s']['numpy']:.2f} s (+{faas['invoke_s']:.2f} s per further worker)"
        + (f"; workers share {cores:g} cores" if cores else ""),
        soft_wrap=True,
    )


def _print_advice(advice: Any, *, every: bool) -> None:
    from rich.table import Table

    from analytic_model.advisor import format_money, format_time

    w = advice.workload
    console.print(
        Text.assemble(
            (w.model, "bold"),
            f" with {w.algorithm}: {w.samples:,} samples, {w.dataset_bytes / 1e9:.3g} GB, "
            f"{w.rounds or w.epochs:g} {'rounds' if w.rounds else 'epochs'}; region {advice.region}, "
            f"profile {advice.target}",
        ),
        soft_wrap=True,
    )
    front = {id(p) for p in advice.pareto}
    rows = [(p, id(p) in front) for p in sorted(advice.rows, key=lambda p: (p.time_s, p.cost))]
    title = "every configuration" if every else "the Pareto front (*) and the fastest of each channel and instance type"
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1))
    for column in ("", "configuration", "time", "cost", "start+load", "compute", "comm"):
        left = column in ("", "configuration")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    short = {"allreduce": "AR", "scatter_reduce": "SR"}
    for p, best in rows if every else advice.summary_rows():
        t = p.time
        if p.platform == "faas":
            how = f" {p.option} {short.get(p.pattern or '', p.pattern)}" if p.workers > 1 else ""
            where = f"FaaS {p.workers:>3}{how} {p.memory_mb}MB"
        else:
            where = f"IaaS {p.workers:>3} {p.option}"
        table.add_row(
            "*" if best else "",
            where,
            format_time(p.time_s),
            format_money(p.cost),
            format_time(t["startup_s"] + t["load_s"]),
            format_time(t["compute_s"]),
            format_time(t["communicate_s"] + t.get("checkpoint_s", 0.0) + t.get("continuation_s", 0.0)),
        )
    console.print(table)
    if advice.skipped:
        console.print(f"{len(advice.skipped)} configurations skipped (e.g. {advice.skipped[0]})")
    console.print(advice.recommendation, soft_wrap=True)
