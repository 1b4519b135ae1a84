"""A deadline or a budget instead of the machinery: ``workers: auto``, ``runtime.memory_mb: auto`` and
``channel: auto`` (or a list of channels to choose among), with ``train --deadline`` or ``--budget``.

Before any worker starts, the cost model predicts the job in every configuration the file leaves
open: each worker count its dataset's shards allow, each memory size the advisor weighs, each
channel the stack offers (or the file lists), on the profile the job would be predicted from
(``runtime.prediction_record``). For a deadline it picks the cheapest configuration whose predicted
upper time meets it; for a budget, the fastest whose predicted upper cost fits; with neither, the
advisor's recommendation. Where nothing meets the goal, it refuses the job in one line naming the
closest configuration and what it would take.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lambdaml import catalogue
from lambdaml.channels.kinds.direct import RENDEZVOUS_KINDS
from lambdaml.config import JobSpec
from lambdaml.config.job import AUTO
from lambdaml.errors import ConfigError
from lambdaml.runtime.prediction_record import (
    RanUnder,
    describe_prediction,
    predict_job,
    profile_for,
    recorded,
    workload_of,
)
from lambdaml.runtime.reports import PredictedRun

if TYPE_CHECKING:
    from analytic_model import Prediction, Workload

#: Seconds in a duration's unit: ``90``, ``90s``, ``10m``, ``1.5h``.
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([smh]?)\s*", re.IGNORECASE)
DIRECT = "direct"
#: The most workers a job may have (``JobSpec.workers``).
MAX_WORKERS = 1024


@dataclass(frozen=True)
class Goal:
    """What a user asks of a job instead of a worker count: a deadline in seconds, or a budget in dollars."""

    deadline_s: float | None = None
    budget: float | None = None

    @property
    def kind(self) -> str:
        """The option that gave it: ``deadline`` or ``budget``."""
        return "deadline" if self.deadline_s is not None else "budget"

    def describe(self) -> str:
        from analytic_model.advisor import format_money, format_time

        if self.deadline_s is not None:
            return f"deadline {format_time(self.deadline_s)}"
        return f"budget {format_money(self.budget or 0.0)}"


def parse_goal(deadline: str | None, budget: str | None) -> Goal | None:
    """``--deadline`` or ``--budget`` as given (None: neither); both, or a value that is not one, is one line."""
    if deadline is not None and budget is not None:
        raise ConfigError("give --deadline or --budget, not both")
    if deadline is not None:
        return Goal(deadline_s=parse_duration(deadline, "--deadline"))
    if budget is not None:
        try:
            dollars = float(budget.strip().removeprefix("$"))
        except ValueError:
            raise ConfigError(f"--budget must be dollars (e.g. 0.50), got {budget!r}") from None
        if not math.isfinite(dollars) or dollars <= 0:
            raise ConfigError(f"--budget must be positive, got {budget!r}")
        return Goal(budget=dollars)
    return None


def parse_duration(text: str, what: str) -> float:
    """Seconds from ``90``, ``90s``, ``10m`` or ``1.5h``; anything else, or not above zero, is one line."""
    found = _DURATION.fullmatch(text)
    if found is None:
        raise ConfigError(f"{what} must be a duration (e.g. 90s, 10m, 1.5h), got {text!r}")
    seconds = float(found.group(1)) * _UNITS[found.group(2).lower()]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{what} must be positive, got {text!r}")
    return seconds


@dataclass(frozen=True)
class Choice:
    """The configuration chosen (the job file's fields it fills), its prediction, the profile that
    made it, and the goal it was chosen for (None: the advisor's recommendation)."""

    fields: Mapping[str, object]
    prediction: Prediction
    profile: str
    goal: Goal | None
    workload: Workload | None = None

    @property
    def workers(self) -> int:
        return self.prediction.workers

    def reason(self) -> str:
        return "the advisor's recommendation" if self.goal is None else f"the {self.goal.describe()}"

    def recorded(self) -> PredictedRun:
        """The chosen configuration's prediction as the result records it, with what it was chosen for."""
        return replace(recorded(self.prediction, self.profile, self.workload), chosen_for=self.reason())

    def ran_under(self) -> RanUnder:
        return RanUnder(prediction=self.recorded())

    def apply(self, raw: Mapping[str, object]) -> dict[str, object]:
        """The job file with the choice in it."""
        return _patched(raw, self.fields)

    def describe(self) -> str:
        """One line: the choice, and its prediction with the ranges."""
        return f"chose for {self.reason()}: {describe_prediction(self.recorded())}"


def open_fields(raw: object) -> list[str]:
    """What a job file leaves to the cost model: ``workers``, ``memory`` and ``channel``, where it says auto."""
    if not isinstance(raw, Mapping):
        return []
    runtime, channel = raw.get("runtime"), raw.get("channel")
    return [
        name
        for name, left in (
            ("workers", raw.get("workers") == AUTO),
            ("memory", isinstance(runtime, Mapping) and runtime.get("memory_mb") == AUTO),
            ("channel", channel == AUTO or isinstance(channel, list)),
        )
        if left
    ]


def wants_choice(raw: object) -> bool:
    """Whether a job file leaves any of its configuration to the cost model."""
    return bool(open_fields(raw))


def _patched(raw: Mapping[str, object], fields: Mapping[str, object]) -> dict[str, object]:
    data = dict(raw)
    if "workers" in fields:
        data["workers"] = fields["workers"]
    if "memory_mb" in fields:
        data["runtime"] = {**dict(raw.get("runtime") or {}), "memory_mb": fields["memory_mb"]}  # type: ignore[call-overload]
    if "channel" in fields:
        data["channel"] = fields["channel"]
    return data


def _channels(raw: Mapping[str, object], stack: str | None) -> list[object]:
    """The channels ``channel: auto`` chooses among: the list the file gives, or every kind a stack
    offers (binding filters out what it lacks)."""
    channel = raw.get("channel")
    if isinstance(channel, list):
        if not channel:
            raise ConfigError("channel: give a list of the channels to choose among, not an empty one")
        return list(channel)
    if stack is None:
        raise ConfigError(
            "channel: auto chooses among a stack's channels (give --stack), or list the ones to choose among"
        )
    # Every kind the stack binds (its resources exist), a direct channel meeting through each store it has.
    stores: list[object] = [{"kind": kind} for kind in catalogue.shared_channels() if kind != DIRECT]
    return stores + [{"kind": DIRECT, "rendezvous": {"kind": kind}} for kind in RENDEZVOUS_KINDS]


def _configurations(raw: Mapping[str, object], shards: int, stack: str | None) -> list[dict[str, object]]:
    """Every configuration the file leaves open, as the fields each one fills."""
    from analytic_model.advisor import DEFAULT_MEMORY_MB

    left = open_fields(raw)
    counts: list[object] = [w for w in range(1, min(shards, MAX_WORKERS) + 1) if shards % w == 0]
    options: list[tuple[str, list[object]]] = []
    if "workers" in left:
        options.append(("workers", counts))
    if "memory" in left:
        options.append(("memory_mb", list(DEFAULT_MEMORY_MB)))
    if "channel" in left:
        options.append(("channel", _channels(raw, stack)))
    found: list[dict[str, object]] = [{}]
    for name, values in options:
        found = [{**fields, name: value} for fields in found for value in values]
    return found


def choose_configuration(
    raw: Mapping[str, object],
    goal: Goal | None,
    bind: Callable[[Mapping[str, object]], JobSpec],
    backend: str,
    *,
    stack: str | None = None,
) -> Choice:
    # ``backend``: its name (``local``, ``iaas-local``, ``lambda``); ``stack``: the stack's, for its profile.
    """The configuration for ``goal`` (None: the advisor's recommendation): ``bind(raw)`` validates a
    job file (bound to its stack). ConfigError in one line where the file leaves nothing open for a
    goal, nothing open can be predicted, or nothing meets the goal."""
    from lambdaml.data.shards import read_manifest
    from lambdaml.storage import open_storage

    if not wants_choice(raw):
        if goal is None:
            raise ConfigError("the job leaves nothing to choose: set workers, runtime.memory_mb or channel to auto")
        raise ConfigError(f"--{goal.kind} chooses the configuration: set workers (or memory_mb, or channel) to auto")
    profile, name = profile_for(stack)
    configurations = _configurations(raw, 1, stack)  # the dataset is read from the first that binds
    template, why = None, ""
    for fields in configurations:
        try:
            template = bind(_patched(raw, {"workers": 1, **fields}))
            break
        except ConfigError as exc:  # a channel the stack lacks
            why = str(exc)
    if template is None:
        raise ConfigError(f"cannot choose a configuration: none of the job's options binds ({why})")
    manifest = read_manifest(open_storage(template.storage), template.dataset)
    workload = workload_of(template, manifest)
    found: list[tuple[Prediction, dict[str, object]]] = []
    for fields in _configurations(raw, manifest.shards, stack):
        try:
            job = bind(_patched(raw, fields))
            found.append((predict_job(job, workload, profile, backend), fields))
        except ConfigError as exc:  # what the stack lacks, or the model rules out (memory, the 15-minute limit)
            why = str(exc)
    if not found:
        raise ConfigError(f"cannot choose a configuration: the cost model predicts none ({why})")
    chosen = _pick([p for p, _ in found], goal, workload, template)
    fields = next(f for p, f in found if p is chosen)
    # A channel chosen is written as the file would give it, and bound to the stack like one.
    return Choice(fields=fields, prediction=chosen, profile=name, goal=goal, workload=workload)


def _pick(found: list[Prediction], goal: Goal | None, workload: Workload, job: JobSpec) -> Prediction:
    """For a deadline, the cheapest whose upper time meets it; for a budget, the fastest whose upper
    cost fits; with neither, the advisor's recommendation."""
    from analytic_model.advisor import Advice, format_money, format_time

    if goal is None:
        advice = Advice(workload, job.storage.region, "", found)
        best = advice.recommended
        return best if best in found else next(p for p in found if p.time_s == best.time_s and p.cost == best.cost)
    if goal.deadline_s is not None:
        deadline = goal.deadline_s
        meets = [p for p in found if p.time_range_s[1] <= deadline]
        if meets:
            return min(meets, key=lambda p: (p.cost, p.time_s))
        closest = min(found, key=lambda p: p.time_range_s[1])
        raise ConfigError(
            f"nothing meets the {format_time(deadline)} deadline: the fastest, {closest.label}, is "
            f"predicted {format_time(closest.time_s)} (up to {format_time(closest.time_range_s[1])}); "
            f"allow at least {format_time(closest.time_range_s[1])}, or train on less data or fewer epochs"
        )
    budget = goal.budget or 0.0
    fits = [p for p in found if p.cost_range[1] <= budget]
    if fits:
        return min(fits, key=lambda p: (p.time_s, p.cost))
    closest = min(found, key=lambda p: p.cost_range[1])
    raise ConfigError(
        f"nothing fits the {format_money(budget)} budget: the cheapest, {closest.label}, is "
        f"predicted {format_money(closest.cost)} (up to {format_money(closest.cost_range[1])}); "
        f"allow at least {format_money(closest.cost_range[1])}, or train on less data or fewer epochs"
    )
