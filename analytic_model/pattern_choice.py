"""The collective pattern a job's workers use when its job file says ``sync.pattern: auto``.

Each candidate's BSP round is predicted by the cost model (``collectives.collective``) on a
profile's figures for the job's channel, its W and the size of the vector it reduces; the
fastest wins, and on a tie the one listed first (the simpler). The profile is the shipped AWS
defaults unless a calibrated one is given. Every rank computes the same choice from the same
inputs, so all ranks of a job run the same pattern without asking each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analytic_model.collectives import PATTERNS, collective, grid_shape
from analytic_model.profile import Profile
from analytic_model.transfers import Polling
from analytic_model.uncertainty import Uncertainty, overlap


@dataclass(frozen=True)
class PatternChoice:
    """The pattern chosen, its predicted round (seconds, the collective alone), and every candidate's."""

    pattern: str
    predicted_round_s: float
    predictions: dict[str, float]

    def contenders(self, uncertainty: Uncertainty) -> tuple[str, ...]:
        """The chosen pattern and every other whose predicted round the model cannot tell apart
        from it (their time ranges overlap), fastest predicted first: the ones worth timing."""
        chosen = uncertainty.time_range(self.predicted_round_s)
        near = [p for p, s in self.predictions.items() if overlap(uncertainty.time_range(s), chosen)]
        return tuple(sorted(near, key=lambda p: (p != self.pattern, self.predictions[p])))


def candidates(workers: int, *, compressed: bool) -> tuple[str, ...]:
    """The patterns worth predicting: 2-D needs a grid other than 1 x W, and has no compressed form."""
    grid = grid_shape(workers)[0] > 1
    return tuple(p for p in PATTERNS if p != "scatter_reduce_2d" or (grid and not compressed))


def choose_pattern(
    profile: Profile,
    channel: str,
    workers: int,
    vector_bytes: float,
    patterns: Sequence[str] = PATTERNS,
    *,
    authenticated: bool = False,
) -> PatternChoice:
    """The fastest of ``patterns`` for one BSP round of a ``vector_bytes`` vector over ``channel`` at
    ``workers`` (``authenticated``: the job's values carry a MAC, hashed on every put and get)."""
    if workers <= 1:  # no collective at all
        return PatternChoice(patterns[0], 0.0, dict.fromkeys(patterns, 0.0))
    perf = profile.channel(channel, authenticated=authenticated)
    polling = Polling.of(profile, channel)
    predictions = {
        pattern: collective(
            perf, pattern, workers, vector_bytes, profile.compute.add_Bps, polling, profile.codec_header_bytes
        ).seconds
        for pattern in patterns
    }
    best = min(patterns, key=lambda p: (predictions[p], patterns.index(p)))
    return PatternChoice(best, predictions[best], predictions)
