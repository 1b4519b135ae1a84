"""Refit a profile from finished jobs: the model learns from the user's own runs.

Each finished job is predicted again from the profile being refit, and its prediction's time
split three ways against what its workers measured: compute (the ranks' compute), the channel's
rounds (their communication and waiting, per channel kind) and the rest (start-up, loading,
heartbeats: the job's wall time beyond the two). Each part's factor is the median, over the
jobs, of measured over predicted; the refit profile scales the figures behind each part by it:
a part's seconds multiplied, its rates divided, so that part of every later prediction moves by
the factor. The median keeps one disturbed run from setting a figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from analytic_model.profile import Profile, with_figures

#: The fewest jobs on a channel for its rounds to get a factor of their own (one job says more of itself).
MIN_OWN = 2
#: A factor is kept within this: a job whose parts are off by more says more of the job than of the figures.
FACTOR_LIMITS = (0.02, 50.0)
#: The start-up and loading figures (``faas``), seconds or rates; settings (``heartbeat_every_s``) are left alone.
_FAAS_SECONDS = ("cold_start_s", "invoke_s", "warm_start_s", "load_latency_s", "heartbeat_s", "heartbeat_per_worker_s")
_FAAS_RATES = ("network_Bps",)


@dataclass(frozen=True)
class Observed:
    """One finished job: its prediction from the profile being refit (``Prediction.time``'s parts)
    and what it measured (the ranks' mean compute and communication, and its wall time)."""

    channel: str
    predicted: Mapping[str, float]
    compute_s: float
    communicate_s: float  # communication and waiting
    wall_s: float

    @property
    def predicted_s(self) -> float:
        return sum(self.predicted.values())

    def rest(self) -> tuple[float, float]:
        """The wall time beyond compute and communication: (predicted, measured)."""
        predicted = self.predicted_s - self.predicted.get("compute_s", 0.0) - self.predicted.get("communicate_s", 0.0)
        return predicted, self.wall_s - self.compute_s - self.communicate_s


@dataclass(frozen=True)
class Factors:
    """Measured over predicted, per part: compute, each channel's rounds, the rest (1: unchanged)."""

    compute: float = 1.0
    channels: Mapping[str, float] = field(default_factory=dict)
    rest: float = 1.0
    jobs: int = 0


def _median_ratio(pairs: Sequence[tuple[float, float]]) -> float:
    """The median of measured over predicted, over pairs where both are positive (1 where none are)."""
    ratios = [measured / predicted for predicted, measured in pairs if predicted > 0 and measured > 0]
    if not ratios:
        return 1.0
    low, high = FACTOR_LIMITS
    return min(high, max(low, statistics.median(ratios)))


def fit_factors(observed: Sequence[Observed]) -> Factors:
    """Each part's factor from the jobs (``Observed``)."""
    compute = _median_ratio([(o.predicted.get("compute_s", 0.0), o.compute_s) for o in observed])
    kinds = sorted({o.channel for o in observed})
    rounds = [(o.channel, (o.predicted.get("communicate_s", 0.0), o.communicate_s)) for o in observed]
    pooled = _median_ratio([pair for _, pair in rounds])
    # A channel's own factor where it has jobs enough for a median; else every channel's together.
    channels = {
        kind: _median_ratio(own) if len(own := [pair for of, pair in rounds if of == kind]) >= MIN_OWN else pooled
        for kind in kinds
    }
    rest = _median_ratio([o.rest() for o in observed])
    return Factors(compute=compute, channels=channels, rest=rest, jobs=len(observed))


def _scaled(node: Any, factor: float) -> Any:
    """A section of figures with its seconds multiplied by ``factor`` and its rates divided by it."""
    if isinstance(node, Mapping):
        return {key: _scaled_value(key, value, factor) for key, value in node.items()}
    return node


def _scaled_value(key: str, value: Any, factor: float) -> Any:
    if isinstance(value, Mapping):
        if key.endswith("_s"):  # a table of seconds (per runtime): every entry is seconds
            return {k: v * factor if _number(v) else v for k, v in value.items()}
        if key in ("vcpu_gflops",):  # a table of rates
            return {k: v / factor if _number(v) else v for k, v in value.items()}
        return _scaled(value, factor)
    if not _number(value):
        return value
    if key.endswith("_s"):
        return value * factor
    if key.endswith("_Bps"):
        return value / factor
    return value


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def refit_profile(profile: Profile, factors: Factors, why: str) -> Profile:
    """``profile`` with the figures behind each part scaled by its factor (``why``: the figures' source)."""
    figures = profile.to_json()
    compute = figures["compute"]
    changes: dict[str, Any] = {
        "compute": {
            "vcpu_gflops": _scaled_value("vcpu_gflops", compute["vcpu_gflops"], factors.compute),
            "per_step_s": _scaled_value("per_step_s", compute["per_step_s"], factors.compute),
            "measured": _scaled(compute.get("measured") or {}, factors.compute),
            **({"sparse": _scaled(compute["sparse"], factors.compute)} if compute.get("sparse") else {}),
        },
        "channels": {kind: _scaled(figures["channels"][kind], f) for kind, f in factors.channels.items()},
        "faas": {
            **{name: _scaled_value(name, figures["faas"][name], factors.rest) for name in _FAAS_SECONDS},
            **{name: _scaled_value(name, figures["faas"][name], factors.rest) for name in _FAAS_RATES},
        },
    }
    return with_figures(profile, changes, why)
