"""``sync.pattern: auto``: each job runs the collective the cost model predicts fastest for its round.

The prediction uses the channel's figures in a profile: the one ``LAMBDAML_PROFILE`` names (a
``lambdaml calibrate`` output), else the shipped AWS defaults. A fixed pattern is kept, and
its round predicted the same way, so every result says what its rounds were expected to cost.
Where the model cannot tell some patterns apart (their predictions lie within the profile's
uncertainty of each other), the job times them in its first rounds (``lambdaml.comm.trial``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from analytic_model.pattern_choice import candidates, choose_pattern
from analytic_model.profile import Profile, load_profile
from lambdaml import settings
from lambdaml.comm.trial import rounds_text
from lambdaml.config import JobSpec
from lambdaml.errors import ConfigError

log = logging.getLogger(__name__)

AUTO = "auto"


@functools.cache
def _profile(path: str | None) -> Profile:
    return load_profile(path)


@dataclass(frozen=True)
class PatternPlan:
    """What a job's ranks run: ``pattern`` (under auto, the model's choice), every candidate's
    predicted round in seconds (empty: a channel no profile knows), and the ``contenders`` to
    time in the first rounds (empty: the choice stands; ``lambdaml.comm.trial``)."""

    pattern: str
    predictions: Mapping[str, float] = field(default_factory=dict)
    contenders: tuple[str, ...] = ()


def pattern_for(job: JobSpec, vector_bytes: int, *, authenticated: bool | None = None) -> PatternPlan:
    """The plan of the job's ranks for a collective of ``vector_bytes``.

    ``authenticated``: whether the values carry a MAC (the job's secret decides; None: its spec's).
    """
    profile = _profile(os.environ.get(settings.ENV_PROFILE) or None)
    compressed = job.algorithm.compression_spec is not None
    choose = functools.partial(
        choose_pattern, profile, job.channel.kind, job.workers, vector_bytes,
        authenticated=job.channel.authenticates_values if authenticated is None else authenticated,
    )  # fmt: skip
    try:
        if job.sync.pattern != AUTO:
            return PatternPlan(job.sync.pattern, choose((job.sync.pattern,)).predictions)
        choice = choose(candidates(job.workers, compressed=compressed))
    except ConfigError:  # the memory channel: no figures, and nothing for a choice to save
        return PatternPlan(
            candidates(job.workers, compressed=compressed)[0] if job.sync.pattern == AUTO else job.sync.pattern
        )
    # A compressing codec keeps error feedback per chunk, and chunks differ between patterns.
    timed = job.workers > 1 and job.sync.trial_rounds > 0 and job.sync.protocol == "bsp" and not compressed
    contenders = choice.contenders(profile.uncertainty) if timed else ()
    log.info(
        "pattern auto: %s (predicted %s)%s", choice.pattern, rounds_text(choice.predictions),
        f"; timing {', '.join(contenders)} first" if len(contenders) > 1 else "",
    )  # fmt: skip
    return PatternPlan(choice.pattern, choice.predictions, contenders if len(contenders) > 1 else ())
