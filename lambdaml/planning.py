"""A deadline or a budget instead of a worker count: ``workers: auto`` with ``train --deadline`` or ``--budget``.

Before any worker starts, the cost model predicts the job at every worker count its dataset's
shards allow (the channel, pattern and memory as the job gives them), on the profile the job
would be predicted from (``runtime.prediction_record``). For a deadline it picks the cheapest
count whose predicted upper time meets it; for a budget, the fastest whose predicted upper cost
fits. Where none does, it refuses the job in one line naming the closest count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lambdaml.config import JobSpec
from lambdaml.config.job import AUTO_WORKERS
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
    from analytic_model import Prediction

#: Seconds in a duration's unit: ``90``, ``90s``, ``10m``, ``1.5h``.
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([smh]?)\s*", re.IGNORECASE)
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
    """The worker count chosen for a goal, its prediction, and the profile that made it."""

    workers: int
    prediction: Prediction
    profile: str
    goal: Goal

    def recorded(self) -> PredictedRun:
        """The chosen configuration's prediction as the result records it, with what it was chosen for."""
        return replace(recorded(self.prediction, self.profile), chosen_for=self.goal.describe())

    def ran_under(self) -> RanUnder:
        return RanUnder(prediction=self.recorded())

    def describe(self) -> str:
        """One line: the choice, and its prediction with the ranges."""
        return f"chose {self.workers} workers for the {self.goal.describe()}: {describe_prediction(self.recorded())}"


def wants_choice(raw: object) -> bool:
    """Whether a job file leaves its worker count to the cost model (``workers: auto``)."""
    return isinstance(raw, Mapping) and raw.get("workers") == AUTO_WORKERS


def choose_workers(
    raw: Mapping[str, object], goal: Goal, bind: Callable[[int], JobSpec], backend: str, *, stack: str | None = None
) -> Choice:
    # ``backend``: its name (``local``, ``iaas-local``, ``lambda``); ``stack``: the stack's, for its profile.
    """The worker count for ``goal``: ``bind(W)`` is the job with W workers (validated, bound to its
    stack). ConfigError in one line where the job does not leave the count to the model, it cannot
    be predicted, or no count meets the goal."""
    from lambdaml.data.shards import read_manifest
    from lambdaml.storage import open_storage

    if not wants_choice(raw):
        raise ConfigError(f"--{goal.kind} chooses the worker count: set workers: auto")
    template = bind(1)
    profile, name = profile_for(stack)
    manifest = read_manifest(open_storage(template.storage), template.dataset)
    workload = workload_of(template, manifest)
    counts = [w for w in range(1, min(manifest.shards, MAX_WORKERS) + 1) if manifest.shards % w == 0]
    found, why = [], ""
    for count in counts:
        try:
            found.append(predict_job(template, workload, profile, backend, workers=count))
        except ConfigError as exc:  # a count the model rules out (memory, the 15-minute limit)
            why = str(exc)
    if not found:
        raise ConfigError(f"cannot choose a worker count: the cost model predicts none ({why})")
    chosen = _pick(found, goal)
    return Choice(workers=chosen.workers, prediction=chosen, profile=name, goal=goal)


def _pick(found: list[Prediction], goal: Goal) -> Prediction:
    """For a deadline, the cheapest whose upper time meets it; for a budget, the fastest whose upper cost fits."""
    from analytic_model.advisor import format_money, format_time

    if goal.deadline_s is not None:
        deadline = goal.deadline_s
        meets = [p for p in found if p.time_range_s[1] <= deadline]
        if meets:
            return min(meets, key=lambda p: (p.cost, p.time_s))
        closest = min(found, key=lambda p: p.time_range_s[1])
        raise ConfigError(
            f"no worker count meets the {format_time(deadline)} deadline: the fastest, {closest.workers} workers, is "
            f"predicted {format_time(closest.time_s)} (up to {format_time(closest.time_range_s[1])}); "
            f"allow at least {format_time(closest.time_range_s[1])}, or train on less data or fewer epochs"
        )
    budget = goal.budget or 0.0
    fits = [p for p in found if p.cost_range[1] <= budget]
    if fits:
        return min(fits, key=lambda p: (p.time_s, p.cost))
    closest = min(found, key=lambda p: p.cost_range[1])
    raise ConfigError(
        f"no worker count fits the {format_money(budget)} budget: the cheapest, {closest.workers} workers, is "
        f"predicted {format_money(closest.cost)} (up to {format_money(closest.cost_range[1])}); "
        f"allow at least {format_money(closest.cost_range[1])}, or train on less data or fewer epochs"
    )
