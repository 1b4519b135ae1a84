"""What the ``lambdaml`` command prints: the consoles, one-line errors, and the result and table printers.

Markup and emoji codes are off everywhere: messages carry job-file keys, paths, bucket names and
servers' errors ("[/x]" would crash rich's markup parser, "[blink]" vanish, ":x:" turn into an
emoji). The few intended styles are Text objects; a Table's str cells follow the console's markup
setting.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from lambdaml.interrupts import held

if TYPE_CHECKING:
    from rich.table import Table

    from lambdaml.backends.base import WorkerProgress
    from lambdaml.data.shards import Manifest
    from lambdaml.runtime.registry import JobSummary
    from lambdaml.runtime.reports import JobResult


class _Console(Console):
    """A Console whose writes a Ctrl-C does not cut in two (the line would be written again)."""

    def _check_buffer(self) -> None:
        with held():
            super()._check_buffer()


def literal_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that prints every message as it is: no markup, emoji codes or highlighting.

    Lines are not wrapped (the terminal does that), so a path or a number is never split in two;
    tables still fit the console's width.
    """
    return _Console(stderr=stderr, width=width, highlight=False, markup=False, emoji=False, soft_wrap=True)


console = literal_console()
errors = literal_console(stderr=True)
#: What a command says while it works (a job's epochs, calibration steps), as against its result.
progress = literal_console()


def configure(*, quiet: bool, json: bool) -> None:
    """Set up one command's progress lines: none under -q; on stderr while stdout carries JSON."""
    progress.quiet, progress.stderr = quiet, json


def plural(count: float, noun: str, many: str | None = None, *, spec: str = "") -> str:
    """A count and its noun, agreeing: ``1 epoch``, ``2 epochs``, ``0 epochs``, ``1.5 epochs``
    (``many``: a plural that is not the noun and an s). ``spec`` formats the count (``,``, ``g``)."""
    return f"{count:{spec}} {noun if count == 1 else many or noun + 's'}"


def one_line(message: str) -> str:
    """A message as the one line a user error gets: some (botocore's, for one) span several."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def _accuracy_of(result: JobResult) -> str:
    """What an accuracy is of: the class count, and what always answering the most common class scores."""
    classes, majority = result.classes, result.majority_accuracy
    if not classes:
        return ""
    alone = f" (most common class alone: {majority:.4f})" if majority is not None else ""
    return f" over {plural(classes, 'class', 'classes')}{alone}"


def new_table(title: str, columns: Sequence[str], *, left: int = 1) -> Table:
    """A table in the style every command prints: the first ``left`` columns text, the rest figures.

    No cell wraps or is cut; instead headers are short and figures formatted to a few
    characters, so each table fits 80 columns (tests/unit/test_tables_fit.py holds them to it).
    """
    from rich import box
    from rich.table import Table

    # A rule under the headers, two spaces between columns, nothing at the edges.
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 1), pad_edge=False
    )
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < left else "right", no_wrap=True)
    return table


def size(count: float) -> str:
    """Bytes in at most 7 characters below a petabyte: ``304B``, ``121.6KB``, ``1.2GB`` (decimal units)."""
    for unit in ("B", "KB", "MB", "GB"):
        if count < 999.95:
            return f"{count:.0f}{unit}" if unit == "B" else f"{count:.1f}{unit}"
        count /= 1000
    return f"{count:.1f}TB"


def result_table(result: JobResult) -> Table:
    """Each rank's times and channel traffic."""
    from analytic_model.advisor import format_time

    columns = ("rank", "load", "compute", "comm", "wait", "total", "requests", "sent", "sent/round")
    table = new_table("time and traffic per worker", columns, left=0)
    for w in result.workers:
        t, channel = w.times, w.channel
        per_round = channel.per_round.bytes_sent_per_round if channel.per_round else 0.0
        table.add_row(
            str(w.rank),
            *(format_time(s) for s in (t.load_s, t.compute_s, t.communicate_s, t.wait_s, t.total_s)),
            str(int(channel.requests)),
            size(channel.bytes_sent),
            size(per_round),
        )
    return table


def links_line(result: JobResult) -> str | None:
    """How a direct job's values travelled: the pairs its links joined, those dropped, the rounds
    some values went through the store, and the bytes the links carried; None for other channels."""
    rows = [w.channel for w in result.workers]
    if not rows or any(c.links_direct is None for c in rows):
        return None
    world = len(rows)
    pairs = int(sum(c.links_direct or 0 for c in rows)) // 2
    dropped = int(sum(c.links_dropped or 0 for c in rows)) // 2
    fallback = int(max(c.rounds_fallback or 0 for c in rows))
    carried = sum(c.bytes_sent_links or 0 for c in rows)
    return (
        f"links: {pairs} of {world * (world - 1) // 2} pairs direct, {dropped} dropped; "
        f"{plural(fallback, 'round')} with values through the store; {size(carried)} over links"
    )


def print_result(result: JobResult) -> None:
    """A finished job: the per-worker table, then its results (accuracy, time and model, cost, result file).

    Under -q only the results: the table and how the collective was chosen are details.
    """
    details = not progress.quiet
    if details:
        console.print(result_table(result))
    if result.test_accuracy is not None:
        console.print(
            f"test accuracy {result.test_accuracy:.4f}{_accuracy_of(result)}  test loss {result.test_loss:.5f}"
        )
    took = f"{result.wall_time_s:.1f}s"
    if result.attempt > 1 and result.attempts_wall_time_s is not None:  # a resumed job: every attempt's time too
        took += f" ({result.attempts_wall_time_s:.1f}s over {plural(result.attempt, 'attempt')})"
    console.print(f"job {result.job_id} finished in {took}; model at {result.model_uri}")
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
            f"cost ${cost['total_dollars']:.6f}: Lambda {plural(lam['invocations'], 'invocation')} "
            f"({lam['cold_starts']} cold), {lam['gb_seconds']:.2f} GB-s "
            f"(${lam['dollars']:.6f}); {channel['kind']} {plural(int(channel['requests']), 'request')} "
            f"(${channel['dollars']:.6f}); prices as of {cost['prices_checked']}"
        )
    links = links_line(result)
    if details and links:
        console.print(links)
    chose = result.spec.get("sync", {}).get("pattern") == "auto"
    if details and chose and result.pattern is not None and result.predicted_round_s is not None:
        from lambdaml.comm.trial import faster_than_kept, rounds_text

        rounds = result.trial_round_s or {}
        timed = rounds_text(rounds)
        # The trial keeps the model's choice over a faster-timed pattern only within the rounds' spread.
        tie = (
            " (a difference within the rounds' spread: the model's choice)"
            if faster_than_kept(result.pattern, rounds)
            else ""
        )
        console.print(
            f"collective {result.pattern} (sync.pattern auto): {result.predicted_round_s * 1000:.1f} ms a round "
            "predicted" + (f"; kept after timing the first rounds: {timed}{tie}" if timed else "")
        )
    if result.result_path is not None:
        console.print(f"result: {result.result_path}")


def print_json(data: object) -> None:
    """What ``--output json`` prints: one JSON document on stdout, nothing else there."""
    sys.stdout.write(json.dumps(data, indent=1, allow_nan=False) + "\n")


def print_json_line(data: object) -> None:
    """One JSON object on one line of stdout, at once: what a command that follows something prints per event."""
    sys.stdout.write(json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def print_dataset(manifest: Manifest, bucket: str) -> None:
    """The one line ``data prepare`` (and the demo) ends with: what was written, and where."""
    console.print(
        f"dataset {manifest.name} ({manifest.format}): {plural(manifest.train_rows, 'training row')} in "
        f"{plural(manifest.shards, 'shard')}, {plural(manifest.test_rows, 'test row')}, "
        f"{plural(manifest.n_features, 'feature')}, {plural(manifest.n_classes, 'class', 'classes')} "
        f"-> s3://{bucket}/datasets/{manifest.name}/ (version {manifest.dataset_version})"
    )


def profile_table(measured: dict[str, Any]) -> Table:
    """What calibration measured of each channel."""
    columns = ("channel", "put ms", "get ms", "put MB/s", "get MB/s", "store ms/request")
    table = new_table(f"channels ({measured['target']})", columns)
    for kind, c in sorted(measured["channels"].items()):
        table.add_row(
            kind,
            f"{c['latency_put_s'] * 1e3:.2f}",
            f"{c['latency_get_s'] * 1e3:.2f}",
            f"{c['bandwidth_put_Bps'] / 1e6:.0f}",
            f"{c['bandwidth_get_Bps'] / 1e6:.0f}",
            f"{c['server_get_s'] * 1e3:.3f}",
        )
    return table


def _print_profile(measured: dict[str, Any]) -> None:
    console.print(profile_table(measured))
    for key, m in measured.get("compute", {}).get("measured", {}).items():
        console.print(
            f"compute {key}: {m['per_sample_s'] * 1e6:.3f} us per sample, {m['per_step_s'] * 1e6:.0f} us per step",
        )
    faas = measured.get("faas", {})
    cores = faas.get("shared_cores")
    console.print(
        f"worker start-up {faas['cold_start_s']['numpy']:.2f} s (+{faas['invoke_s']:.2f} s per further worker)"
        + (f"; workers share {plural(cores, 'core', spec='g')}" if cores else ""),
    )


#: How the advice table names a communication pattern.
_PATTERN_SHORT = {"allreduce": "AR", "scatter_reduce": "SR", "scatter_reduce_2d": "SR2D"}
#: ... and a Lambda architecture (the table is 80 columns wide when not a terminal).
_ARCH_SHORT = {"x86_64": "x86", "arm64": "arm"}


#: At most this many more decimals tell two starred rows' figures apart; past it a line says what does.
_MORE_DIGITS = 2


def _starred_digits(rows: Sequence[tuple[Any, bool]]) -> tuple[dict[int, tuple[int, int]], bool]:
    """Extra decimals of time and cost for starred rows whose shown figures would read the same as
    the next starred row's (a front row is faster than the next one and dearer: both figures must
    show it), and whether some pair stays alike even so."""
    from analytic_model.advisor import format_money, format_time

    starred = [p for p, best in rows if best]
    extra = {id(p): [0, 0] for p in starred}
    alike = False
    for a, b in itertools.pairwise(starred):
        for i, (fmt, x, y) in enumerate(((format_time, a.time_s, b.time_s), (format_money, a.cost, b.cost))):
            more = 0
            while more <= _MORE_DIGITS and fmt(x, more) == fmt(y, more):
                more += 1
            if more > _MORE_DIGITS:  # more digits would not tell them apart: a line says what does
                alike = True
                continue
            for p in (a, b):
                extra[id(p)][i] = max(extra[id(p)][i], more)
    return {k: (t, c) for k, (t, c) in extra.items()}, alike


def _advice_rows(advice: Any, *, every: bool) -> list[tuple[Any, bool]]:
    if not every:
        return list(advice.summary_rows())
    front = {id(p) for p in advice.pareto}
    return [(p, id(p) in front) for p in advice.distinct]


def advice_table(advice: Any, *, every: bool) -> Table:
    """The configurations the advisor predicted, fastest first; ``*`` marks the Pareto front.

    Rows of the same figures over several channels are one (``a|b``); "start" is all but
    computing and communicating (start-up, loading, checkpoints, heartbeats, fresh invocations),
    so start, compute and comm add up to the time.
    """
    from analytic_model.advisor import format_money, format_time

    rows = _advice_rows(advice, every=every)
    digits, _ = _starred_digits(rows)
    title = "every configuration" if every else "the Pareto front (*) and the fastest of each channel and instance type"
    table = new_table(title, ("", "configuration", "time", "cost", "start", "compute", "comm"), left=2)
    table.padding = (0, 0, 0, 0)  # one space between columns: a merged row's name is long
    for p, best in rows:
        t = p.time
        if p.platform == "faas":
            option = f"{p.option}~" if p.notes else p.option  # "~": modelled only, said under the table
            how = f" {option} {_PATTERN_SHORT.get(p.pattern or '', p.pattern)}" if p.workers > 1 else ""
            shown = p.architecture == "arm64" or p.label_architecture
            arch = f" {_ARCH_SHORT.get(p.architecture or '', p.architecture)}" if shown else ""
            where = f"FaaS {p.workers:>3}{how} {p.memory_mb}MB{arch}"
        else:
            where = f"IaaS {p.workers:>3} {p.option}"
        more_time, more_cost = digits.get(id(p), (0, 0))
        table.add_row(
            "*" if best else "",
            where,
            format_time(p.time_s, more_time),
            format_money(p.cost, more_cost),
            format_time(max(0.0, p.time_s - t["compute_s"] - t["communicate_s"])),
            format_time(t["compute_s"]),
            format_time(t["communicate_s"]),
        )
    return table


def _print_advice(advice: Any, *, every: bool) -> None:
    w = advice.workload
    console.print(
        Text.assemble(
            (w.model, "bold"),
            f" with {w.algorithm}: {plural(w.samples, 'sample', spec=',')}, {w.dataset_bytes / 1e9:.3g} GB, "
            f"{plural(w.rounds or w.epochs, 'round' if w.rounds else 'epoch', spec='g')}; region {advice.region}, "
            f"profile {advice.target}",
        ),
    )
    console.print(advice_table(advice, every=every))
    if _starred_digits(_advice_rows(advice, every=every))[1]:
        console.print("* rows that read alike: the upper is faster, the lower cheaper, by less than the digits shown")
    from analytic_model.kinds import NOTE_MEANINGS

    for note in sorted({note for p in advice.rows for note in p.notes}):
        kinds = sorted({p.option for p in advice.rows if note in p.notes})
        console.print(f"~ {', '.join(kinds)}: {note} ({NOTE_MEANINGS.get(note, 'see --json')})")
    shown = [p for p, _ in _advice_rows(advice, every=every)]
    for how in dict.fromkeys(p.rendezvous_billing for p in shown if p.rendezvous_billing):
        console.print(f"direct: its rendezvous service is priced as {how}, beside the endpoints' store requests")
    spread = advice.uncertainty
    if spread is not None:
        console.print(
            f"ranges: a measured time may fall {1 / (1 + spread.time_fraction) - 1:+.0%} to "
            f"{1 / (1 - spread.time_fraction) - 1:+.0%} from its prediction, a cost "
            f"{1 / (1 + spread.cost_fraction) - 1:+.0%} to {1 / (1 - spread.cost_fraction) - 1:+.0%} "
            "(the profile's uncertainty; --json gives every row's)"
        )
    if advice.skipped:
        console.print(f"{plural(len(advice.skipped), 'configuration')} skipped (e.g. {advice.skipped[0]})")
    console.print(advice.recommendation)


def status_table(status: WorkerProgress) -> Table:
    """A job's workers as their last heartbeats tell: epochs done, the last loss, the steps done of the next epoch."""
    table = new_table("workers", ("rank", "epoch", "loss", "step", "invocation"), left=0)
    for beat in status["heartbeats"]:
        steps, loss = beat.get("steps"), beat.get("loss")
        table.add_row(
            str(beat["rank"]),
            f"{beat['epoch']}/{status['epochs']}",
            "-" if loss is None else f"{loss:.5f}",
            f"{beat.get('step', 0)}/{steps}" if steps else "-",
            str(beat["invocation"]),
        )
    return table


def jobs_table(summaries: Sequence[JobSummary], *, now: float, predicted: Mapping[str, str] | None = None) -> Table:
    """Jobs newest first: state, attempts, how long ago each began, how long it ran, and its cost once known
    (``~``: a job that ended without a result, its cost estimated from its workers' run time); with
    ``predicted`` (job id: its measured time over the time predicted before it ran), that too."""
    from analytic_model.advisor import format_time

    columns = ("job", "state", "try", "age", "took", "cost") + (() if predicted is None else ("x pred",))
    table = new_table("jobs", columns, left=2)
    for s in summaries:
        table.add_row(
            s["job_id"],
            s["state"],
            str(s["attempt"]),
            format_time(max(0.0, now - s["created_at"])),
            format_time(s["duration_s"]),
            cost_text(s.get("cost_dollars"), s.get("cost_estimated")),
            *(() if predicted is None else (predicted.get(s["job_id"], "-"),)),
        )
    if any(s.get("cost_estimated") and s["cost_dollars"] is not None for s in summaries):
        # Under the table, whole: a caption would wrap to a narrow table's width.
        table.caption, table.caption_justify = Text(ESTIMATED, no_wrap=True, overflow="ignore"), "left"
    return table


#: What a ``~`` before a cost says.
ESTIMATED = "~ estimated from the workers' run time (the job ended without its bill)"


def cost_text(cost: float | None, estimated: bool | None) -> str:
    """A job record's cost: ``$0.001234``, ``~$0.000800`` for an estimate, ``-`` while unknown."""
    from analytic_model.advisor import format_money

    if cost is None:
        return "-"
    return ("~" if estimated else "") + format_money(cost)


def datasets_table(found: Sequence[Mapping[str, object]]) -> Table:
    """Datasets by name (``data.versions.datasets``): how many versions, and the current one's rows,
    shards and bytes (None where its manifest did not read)."""

    def count(value: object) -> str:
        return "-" if value is None else f"{value:,}"

    table = new_table("datasets", ("dataset", "vers", "rows", "test", "shards", "size"))
    for d in found:
        stored = d["bytes"]
        table.add_row(
            str(d["name"]),
            str(d["versions"]),
            count(d["train_rows"]),
            count(d["test_rows"]),
            count(d["shards"]),
            size(stored) if isinstance(stored, int | float) else "-",
        )
    return table
