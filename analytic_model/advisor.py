"""The advisor: predict every configuration, keep the Pareto front of time against cost, recommend one.

``advise`` is what ``lambdaml advise`` prints and what a notebook calls::

    from analytic_model import Workload, advise
    advice = advise(Workload("lr", dataset_bytes=8e9, samples=11_000_000, features=28, algorithm="admm"))
    print(advice.recommendation)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from analytic_model.cache_billing import CacheBilling
from analytic_model.collectives import PATTERNS, grid_shape
from analytic_model.kinds import MODELLED_NOTE, MODELLED_ONLY, described, faas_channels
from analytic_model.links import over_links
from analytic_model.prediction import (
    MB,
    Infeasible,
    Prediction,
    PredictionJson,
    iaas_fits,
    memory_needed_mb,
    model_mb,
    predict_faas,
    predict_iaas,
)
from analytic_model.profile import Profile, aws_profile
from analytic_model.tables import ARCHITECTURES, price_table, prices
from analytic_model.uncertainty import Uncertainty, overlap
from analytic_model.workload import Workload
from lambdaml.errors import ConfigError

DEFAULT_WORKERS = (1, 2, 5, 10, 20, 50)
DEFAULT_MEMORY_MB = (1769, 3008, 10240)


#: Rows whose time, cost and every part of the time agree to this fraction of the time (and cost)
#: are one row: far inside what the table shows and the profile's uncertainty.
SAME_FIGURES = 1e-3


class AdviceRow(PredictionJson):
    """A row of ``advise --json``: a prediction, and whether it is on the Pareto front."""

    pareto: bool


class AdviceJson(TypedDict):
    """What ``advise --json`` prints."""

    workload: dict[str, str | float | bool | None]  # the Workload's fields
    region: str
    profile: str
    prices_checked: str | None
    recommendation: str
    recommended: PredictionJson
    too_close_to_call: list[str] | None
    pareto: list[PredictionJson]
    rows: list[AdviceRow]
    skipped: list[str]


@dataclass
class Advice:
    """Every predicted configuration (``rows``); what is chosen among them reads ``distinct``: rows
    that differ only in channel or instance type and predict the same figures are one row there,
    naming each option (``a|b``)."""

    workload: Workload
    region: str
    target: str
    rows: list[Prediction]
    skipped: list[str] = field(default_factory=list)
    # The merged rows, kept with the rows they were made of: what is chosen is told apart by identity.
    _merged: tuple[list[Prediction], list[Prediction]] | None = field(default=None, repr=False, compare=False)

    @property
    def distinct(self) -> list[Prediction]:
        if self._merged is None or self._merged[0] != self.rows:
            self._merged = (list(self.rows), merge_same(self.rows))
        return self._merged[1]

    @property
    def pareto(self) -> list[Prediction]:
        return pareto_front(self.distinct)

    @property
    def fastest(self) -> Prediction:
        return min(self.distinct, key=lambda p: (p.time_s, p.cost))

    @property
    def cheapest(self) -> Prediction:
        return min(self.distinct, key=lambda p: (p.cost, p.time_s))

    @property
    def recommended(self) -> Prediction:
        """The front's best balance: the smallest time x cost (a 2x faster option may cost up to 2x more)."""
        return min(self.pareto, key=lambda p: (p.time_s * p.cost, p.time_s))

    def best(self, platform: str, **match: Any) -> Prediction | None:
        """The fastest row of a platform whose fields match (e.g. ``option="s3"``, ``workers=10``)."""
        rows = [r for r in self.rows if r.platform == platform and all(getattr(r, k) == v for k, v in match.items())]
        return min(rows, key=lambda p: (p.time_s, p.cost)) if rows else None

    @property
    def uncertainty(self) -> Uncertainty | None:
        """The profile's uncertainty, which every row carries."""
        return self.rows[0].uncertainty if self.rows else None

    @property
    def runner_up(self) -> Prediction | None:
        """The best row by the same measure as ``recommended`` over another option (channel or instance
        type), whose figures are not the recommended row's (those would be one choice, not two)."""
        best = self.recommended
        mine = {(best.platform, o) for o in options_of(best)}
        others = [
            p
            for p in self.distinct
            if not mine & {(p.platform, o) for o in options_of(p)} and not same_figures(p, best)
        ]
        return min(others, key=lambda p: (p.time_s * p.cost, p.time_s)) if others else None

    @property
    def too_close_to_call(self) -> tuple[Prediction, Prediction] | None:
        """The recommended row and the runner-up where their ranges overlap in both time and cost:
        the model cannot tell which of the two is better."""
        best, other = self.recommended, self.runner_up
        if other is None:
            return None
        close = overlap(best.time_range_s, other.time_range_s) and overlap(best.cost_range, other.cost_range)
        return (best, other) if close else None

    @property
    def recommendation(self) -> str:
        best, fast, cheap = self.recommended, self.fastest, self.cheapest
        close = self.too_close_to_call
        if close is None:
            named = [best]
            line = f"recommended: {best.label}: {estimate(best)}"
        else:
            named = list(close)
            line = (
                f"too close to call: {close[0].label}: {estimate(close[0])} against {close[1].label}: "
                f"{estimate(close[1])} (their ranges overlap in time and in cost)"
            )
        if all(fast is not p for p in named):
            line += f"; fastest: {fast.label}: {estimate(fast)}"
        if all(cheap is not p for p in named):
            line += f"; cheapest: {cheap.label}: {estimate(cheap)}"
        billed = dict.fromkeys(p.cache_billing for p in (*named, fast, cheap) if p.cache_billing)
        meeting = dict.fromkeys(p.rendezvous_billing for p in (*named, fast, cheap) if p.rendezvous_billing)
        return (
            line
            + "".join(f"; cache billed as {how}" for how in billed)
            + "".join(f"; rendezvous service billed as {how}" for how in meeting)
        )

    def to_dict(self) -> AdviceJson:
        front = {(p.platform, p.workers, p.pattern, p.memory_mb, p.architecture, option)
                 for p in self.pareto for option in options_of(p)}  # fmt: skip
        return {
            "workload": self.workload.__dict__,
            "region": self.region,
            "profile": self.target,
            "prices_checked": price_table().get("_checked"),
            "recommendation": self.recommendation,
            "recommended": self.recommended.to_dict(),
            "too_close_to_call": [p.label for p in close] if (close := self.too_close_to_call) else None,
            "pareto": [p.to_dict() for p in self.pareto],
            "rows": [
                {
                    **p.to_dict(),
                    "pareto": (p.platform, p.workers, p.pattern, p.memory_mb, p.architecture, p.option) in front,
                }
                for p in self.rows
            ],
            "skipped": self.skipped,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    def summary_rows(self) -> list[tuple[Prediction, bool]]:
        """The Pareto front plus the fastest row of every channel and instance type, by time."""
        front = self.pareto
        keep = {id(p): p for p in front}
        rows = self.distinct
        for platform, option in {(r.platform, o) for r in rows for o in options_of(r)}:
            best = min(
                (r for r in rows if r.platform == platform and option in options_of(r)),
                key=lambda p: (p.time_s, p.cost),
            )
            keep.setdefault(id(best), best)
        members = {id(p) for p in front}
        return [(p, id(p) in members) for p in sorted(keep.values(), key=lambda p: (p.time_s, p.cost))]

    def plot(self, path: str | Path) -> Path:
        """Cost against time of every configuration, the front drawn through (needs matplotlib)."""
        plt = pyplot()
        path = Path(path)
        fig, ax = plt.subplots(figsize=(8, 5.5))
        for platform, colour in (("faas", "tab:orange"), ("iaas", "tab:blue")):
            rows = [r for r in self.rows if r.platform == platform]
            if rows:
                label = "FaaS (Lambda)" if platform == "faas" else "IaaS (EC2)"
                ax.scatter([r.time_s for r in rows], [r.cost for r in rows], s=14, alpha=0.5, c=colour, label=label)
        front = self.pareto
        ax.plot([p.time_s for p in front], [p.cost for p in front], "k-", lw=1, label="Pareto front")
        best = self.recommended
        ax.scatter([best.time_s], [best.cost], s=120, facecolors="none", edgecolors="red", label="recommended")
        (t_low, t_high), (c_low, c_high) = best.time_range_s, best.cost_range
        ax.errorbar([best.time_s], [best.cost], xerr=[[best.time_s - t_low], [t_high - best.time_s]],
                    yerr=[[best.cost - c_low], [c_high - best.cost]], fmt="none", ecolor="red", lw=0.8)  # fmt: skip
        ax.annotate(best.label, (best.time_s, best.cost), textcoords="offset points", xytext=(8, 8), fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("predicted time (s)")
        ax.set_ylabel("predicted cost ($)")
        where = f"{self.target} profile, {self.region} prices"
        ax.set_title(f"{self.workload.model}, {self.workload.algorithm}: cost against time ({where})")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return path


def pareto_front(rows: Iterable[Prediction]) -> list[Prediction]:
    """Configurations no other is both faster and cheaper than, by time."""
    front: list[Prediction] = []
    for row in sorted(rows, key=lambda p: (p.time_s, p.cost)):
        if not front or row.cost < front[-1].cost:
            front.append(row)
    return front


def options_of(row: Prediction) -> list[str]:
    """The channels or instance types a (merged) row stands for."""
    return row.option.split("|")


def same_figures(a: Prediction, b: Prediction) -> bool:
    """Whether two rows predict the same: time, cost and each part of the time within ``SAME_FIGURES``."""
    scale = max(a.time_s, b.time_s)
    parts = a.time.keys() | b.time.keys()
    return (
        math.isclose(a.time_s, b.time_s, rel_tol=SAME_FIGURES)
        and math.isclose(a.cost, b.cost, rel_tol=SAME_FIGURES)
        and all(abs(a.time.get(k, 0.0) - b.time.get(k, 0.0)) <= SAME_FIGURES * scale for k in parts)
    )


def merge_same(rows: Iterable[Prediction]) -> list[Prediction]:
    """Rows that differ only in channel or instance type and predict the same figures, as one row
    with the first's figures naming every option, fastest first (``a|b``); the rest as they are."""
    groups: dict[tuple[Any, ...], list[list[Prediction]]] = {}
    for row in sorted(rows, key=lambda p: (p.time_s, p.cost)):
        key = (
            row.platform,
            row.workers,
            row.pattern,
            row.memory_mb,
            row.architecture,
            row.label_architecture,
            row.notes,
        )
        alike = groups.setdefault(key, [])
        group = next((g for g in alike if same_figures(g[0], row)), None)
        if group is None:
            alike.append([row])
        else:
            group.append(row)
    merged = [
        g[0] if len(g) == 1 else replace(g[0], option="|".join(p.option for p in g))
        for alike in groups.values()
        for g in alike
    ]
    return sorted(merged, key=lambda p: (p.time_s, p.cost))


def advise(
    workload: Workload,
    profile: Profile | None = None,
    *,
    workers: Sequence[int] = DEFAULT_WORKERS,
    channels: Sequence[str] | None = None,
    patterns: Sequence[str] = PATTERNS,
    memory_mb: Sequence[int] = DEFAULT_MEMORY_MB,
    instances: Sequence[str] | None = None,
    region: str = "us-east-1",
    cache_node: str | None = None,
    architecture: str | Sequence[str] = "x86_64",
    cache: CacheBilling | None = None,
) -> Advice:
    """Predict every combination of worker count with channel, pattern and memory (FaaS) or instance type (IaaS).

    ``architecture``: one Lambda architecture or several (FaaS rows for each). ``channels`` (default:
    those Lambda workers can share that the profile has figures for) may name a channel the model knows
    only (``MODELLED_ONLY``: S3 Express) or one of one process's, which are never tried unless named.
    ``cache``: how a cache channel is billed (``predict_faas``; None: the job's share of the node's hours).
    """
    profile = profile or aws_profile()
    info = workload.check(profile)
    table = prices(region)
    for w in workers:
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ConfigError(f"worker counts must be positive integers, got {w!r}")
    low, high = profile.lambda_.min_memory_mb, profile.lambda_.max_memory_mb
    for memory in memory_mb:  # every size, those a shard rules out included (predict_faas checks the rest)
        if isinstance(memory, bool) or not isinstance(memory, int) or not low <= memory <= high:
            raise ConfigError(f"Lambda memory must be {low:g}-{high:g} MB, got {memory!r}")
    for pattern in patterns:
        if pattern not in PATTERNS:
            raise ConfigError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    channel_list = list(channels) if channels is not None else faas_channels(profile.channels)
    for channel in channel_list:
        profile.channel(channel)
        billing = described(channel).prices
        if billing is not None and billing not in table:
            note = f" ({MODELLED_NOTE})" if channel in MODELLED_ONLY else ""
            raise ConfigError(f"no {region} prices for channel {channel!r}{note}")
    architectures = [architecture] if isinstance(architecture, str) else list(dict.fromkeys(architecture))
    for arch in architectures:
        if arch not in ARCHITECTURES:
            raise ConfigError(f"unknown Lambda architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    if not architectures:
        raise ConfigError("no Lambda architecture to try")
    # One worker has nothing to synchronize: its row names a channel that exists.
    single = next((c for c in channel_list if c not in MODELLED_ONLY), "s3")
    instance_list = list(instances) if instances is not None else sorted(set(table["ec2"]) & set(profile.instances))
    for name in instance_list:
        profile.instance(name)
        if name not in table["ec2"]:
            raise ConfigError(f"no {region} price for instance type {name!r}")

    rows: list[Prediction] = []
    skipped: list[str] = []
    patterns = _patterns_for(workload, patterns, skipped)
    model = model_mb(workload, info)  # the model's state: a worker holds all of it, whatever W
    with_model = f" and its model's state ({math.ceil(model)} MB)" if model >= 1 else ""
    for w in sorted(set(workers)):
        need = memory_needed_mb(profile, workload.dataset_bytes / w, info.runtime, model * MB)
        for memory in memory_mb:
            if memory < need:
                skipped.append(
                    f"FaaS {w} x {memory} MB: a worker needs about {math.ceil(need)} MB for its shard{with_model}"
                )
                continue
            # One worker has nothing to synchronize: one row per memory size.
            combos = [(single, PATTERNS[0])] if w == 1 else [
                (channel, pattern) for channel in channel_list for pattern in _tried(channel, patterns, w)
            ]  # fmt: skip
            for (channel, pattern), arch in [(combo, arch) for combo in combos for arch in architectures]:
                try:
                    row = predict_faas(workload, w, channel, pattern, memory, profile, region=region,
                                       cache_node=cache_node, architecture=arch, cache=cache)  # fmt: skip
                except Infeasible as exc:
                    why = f"FaaS {w} x {memory} MB over {channel}: {exc}"
                    if why not in skipped:  # once, not once per architecture
                        skipped.append(why)
                    continue
                rows.append(replace(row, label_architecture=True) if len(architectures) > 1 else row)
        for name in instance_list:
            if not iaas_fits(workload, w, name, profile):
                skipped.append(f"IaaS {w} x {name}: its memory does not hold a shard of the dataset")
                continue
            try:
                rows.append(predict_iaas(workload, w, name, profile, region=region))
            except Infeasible as exc:
                skipped.append(f"IaaS {w} x {name}: {exc}")
    if not rows:
        if memory_needed_mb(profile, 0.0, info.runtime, model * MB) > max(memory_mb, default=0):
            raise ConfigError(
                f"no configuration fits: model {workload.model!r} with {workload.n_params(info):,} parameters needs "
                f"about {math.ceil(model)} MB a worker for its state and buffers, more than any memory tried "
                f"(Lambda allows up to {high:g} MB) or any instance's"
            )
        raise ConfigError("no configuration fits: use more workers or larger Lambda memory / instances")
    return Advice(workload, region, profile.target, rows, skipped)


def _patterns_for(workload: Workload, patterns: Sequence[str], skipped: list[str]) -> list[str]:
    """The patterns a workload's rounds can run over: compression refuses the 2-D one, and ASP
    pushes and pulls the same way whatever the pattern (one row, not one per pattern)."""
    kept = list(patterns)
    if workload.compressor is not None and "scatter_reduce_2d" in kept:
        kept.remove("scatter_reduce_2d")
        skipped.append("pattern scatter_reduce_2d: compression runs over allreduce or scatter_reduce only")
    if workload.protocol != "bsp":
        kept = kept[:1]
    if not kept:
        raise ConfigError("no pattern left to try: compression runs over pattern 'allreduce' or 'scatter_reduce'")
    return kept


def _tried(channel: str, patterns: Sequence[str], workers: int) -> list[str]:
    """The patterns tried over a channel: over direct links the communicator picks its own sum
    (one row, whichever pattern it would fall back to), else those whose rounds differ."""
    return list(patterns[:1]) if over_links(channel) else _distinct(patterns, workers)


def _distinct(patterns: Sequence[str], workers: int) -> list[str]:
    """The patterns whose rounds differ at ``workers``: on a prime W's 1 x W grid the 2-D pattern
    is flat ScatterReduce, a row of its own only where ScatterReduce is not tried."""
    if grid_shape(workers)[0] == 1 and "scatter_reduce" in patterns:
        return [p for p in patterns if p != "scatter_reduce_2d"]
    return list(patterns)


def pyplot() -> Any:
    """matplotlib's pyplot drawing to files only (no display needed); a one-line hint where it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'lambdaml[plot]'") from None
    return plt


class CurvePoint(TypedDict):
    epoch: float
    loss: float | None


class MeasuredRun(TypedDict, total=False):
    loss_curve: Sequence[CurvePoint]  # what ``epochs_to_target`` reads of a result


def epochs_to_target(result: MeasuredRun, target_loss: float) -> float:
    """Epochs a measured run took to reach ``target_loss``, from its result's loss curve."""
    curve = result.get("loss_curve") if isinstance(result, dict) else None
    if not curve:
        raise ConfigError("the result has no loss curve")
    for point in curve:
        if (loss := point.get("loss")) is not None and loss <= target_loss:
            return float(point["epoch"])
    best = min(loss for p in curve if (loss := p.get("loss")) is not None)
    raise ConfigError(
        f"the run never reached loss {target_loss:g} in {len(curve)} epoch{'' if len(curve) == 1 else 's'} "
        f"(best {best:.5f}); "
        "run it longer or pick a higher target"
    )


def estimate(p: Prediction) -> str:
    """A prediction's time and cost with their ranges: ``12.3s (9.5s-17.6s), $0.0070 ($0.0054-$0.0100)``."""
    (t_low, t_high), (c_low, c_high) = p.time_range_s, p.cost_range
    return f"{_time(p.time_s)} ({_time(t_low)}-{_time(t_high)}), {_money(p.cost)} ({_money(c_low)}-{_money(c_high)})"


def _time(seconds: float, extra: int = 0) -> str:
    """A duration in 6 characters or fewer below 1000 days (``523ms``, ``12.3s``, ``10.3m``, ``2.5h``,
    ``82.9d``); ``extra`` more decimals where two figures must be told apart."""
    for limit, unit, scale, decimals in _TIME_UNITS:
        if seconds < limit:
            return f"{seconds / scale:.{decimals + extra}f}{unit}"
    return f"{seconds / 86_400:.{1 + extra}f}d"


#: Below each limit (seconds), a duration's unit, its size in seconds and its decimals.
_TIME_UNITS = ((1, "ms", 1e-3, 0), (120, "s", 1, 1), (7200, "m", 60, 1), (172_800, "h", 3600, 1))


def _money(dollars: float, extra: int = 0) -> str:
    """Dollars to a millionth below a cent (a short run), a hundredth of a cent below $1, the cent below
    $1000, and whole dollars from there; ``extra`` more decimals where two figures must be told apart."""
    if dollars < 0.01:
        return f"${dollars:.{6 + extra}f}"
    if dollars < 1:
        return f"${dollars:.{4 + extra}f}"
    return f"${dollars:,.{2 + extra}f}" if dollars < 1000 else f"${dollars:,.{extra}f}"


format_time = _time
format_money = _money
