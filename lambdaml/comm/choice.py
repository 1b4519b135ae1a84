"""``sync.pattern: auto``: each job runs the collective the cost model predicts fastest for its round.

The prediction uses the channel's figures in a profile: the one ``LAMBDAML_PROFILE`` names (a
``lambdaml calibrate`` output), else the shipped AWS defaults. A fixed pattern is kept, and
its round predicted the same way, so every result says what its rounds were expected to cost.
"""

from __future__ import annotations

import functools
import logging
import os

from analytic_model.pattern_choice import PatternChoice, candidates, choose_pattern
from analytic_model.profile import Profile, load_profile
from lambdaml import settings
from lambdaml.config import JobSpec
from lambdaml.errors import ConfigError

log = logging.getLogger(__name__)

AUTO = "auto"


@functools.cache
def _profile(path: str | None) -> Profile:
    return load_profile(path)


def pattern_for(job: JobSpec, vector_bytes: int) -> tuple[str, float | None]:
    """The pattern the job's ranks run, and its predicted round in seconds (None: a channel no profile knows)."""
    profile = _profile(os.environ.get(settings.ENV_PROFILE) or None)
    compressed = job.algorithm.compression_spec is not None
    choose = functools.partial(
        choose_pattern, profile, job.channel.kind, job.workers, vector_bytes,
        authenticated=job.channel.authenticates_values,
    )  # fmt: skip
    try:
        if job.sync.pattern == AUTO:
            choice = choose(candidates(job.workers, compressed=compressed))
            log.info("pattern auto: %s (predicted %s)", choice.pattern, _rounded(choice))
            return choice.pattern, choice.predicted_round_s
        fixed = choose((job.sync.pattern,))
        return job.sync.pattern, fixed.predicted_round_s
    except ConfigError:  # the memory channel: no figures, and nothing for a choice to save
        return (
            candidates(job.workers, compressed=compressed)[0] if job.sync.pattern == AUTO else job.sync.pattern
        ), None


def _rounded(choice: PatternChoice) -> str:
    return ", ".join(f"{p} {s * 1000:.1f} ms" for p, s in choice.predictions.items())
