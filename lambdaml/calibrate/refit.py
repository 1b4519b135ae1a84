"""``lambdaml calibrate --from-results DIR``: refit a target's profile from its finished jobs.

Every result file in the directory that ran on the target (this machine's backends, or one
stack's functions) and recorded the workload it was predicted for is predicted again from the
target's profile (``runtime.prediction_record.profile_for``), its parts set against what it
measured (``analytic_model.refit``), and the refit profile saved where the target's jobs read
it. Later jobs are predicted from it; the same results are predicted again from it, so the
refit's effect on them is shown (the median error before and after).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from analytic_model import Prediction, Profile, Workload
from analytic_model.profile import save_profile
from analytic_model.refit import Factors, Observed, fit_factors, refit_profile
from lambdaml.config import parse_job
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.runtime.prediction_record import predict_job, profile_for, profile_path_of
from lambdaml.runtime.reports import JobResult, read_result_file

log = logging.getLogger(__name__)

#: The fewest finished jobs a refit takes: one job's parts say more of that job than of the figures.
MIN_JOBS = 3


@dataclass(frozen=True)
class Refit:
    """What a refit did: the factors, the jobs it used (and skipped, with why), the median error of
    the jobs' time predictions before and after, and where the profile was saved."""

    factors: Factors
    used: tuple[str, ...]
    skipped: tuple[str, ...]
    error_before: float
    error_after: float
    path: Path


def _backend_matches(result: JobResult, stack: str | None) -> bool:
    on_lambda = result.backend == "lambda"
    return on_lambda if stack is not None else not on_lambda


def _predicted(result: JobResult, profile: Profile) -> Prediction:
    """The job's prediction from ``profile``, for the workload its result recorded."""
    recorded = result.prediction
    if recorded is None or recorded.workload is None:
        raise ConfigError("its result records no workload (a job from before predictions were recorded)")
    try:
        workload = Workload(**recorded.workload)
    except TypeError as exc:
        raise ConfigError(f"its recorded workload is not one this version reads ({exc})") from None
    return predict_job(parse_job(result.spec, f"job {result.job_id}"), workload, profile, result.backend)


def _observed(result: JobResult, prediction: Prediction) -> Observed:
    rows = result.workers
    compute = statistics.fmean(w.times.compute_s for w in rows)
    communicate = statistics.fmean(w.times.communicate_s + w.times.wait_s for w in rows)
    channel = str(result.spec.get("channel", {}).get("kind", "")) if prediction.platform == "faas" else "gloo"
    return Observed(channel, dict(prediction.time), compute, communicate, result.wall_time_s)


def _median_error(pairs: Sequence[tuple[float, float]]) -> float:
    """The median of |measured - predicted| / predicted over (predicted, measured) pairs."""
    return statistics.median(abs(measured - predicted) / predicted for predicted, measured in pairs)


def refit_from_results(directory: Path, *, stack: str | None = None, out: Path | None = None) -> Refit:
    """Refit the target's profile (``stack``'s, or this machine's) from the finished jobs in ``directory``."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: no such directory of result files")
    profile, name = profile_for(stack)
    used: list[tuple[JobResult, Prediction]] = []
    skipped: list[str] = []
    for path in sorted(directory.glob("*.json")):
        try:
            result = read_result_file(path)
            if result.status != "succeeded" or not result.workers:
                raise ConfigError("the job did not succeed")
            if not _backend_matches(result, stack):
                raise ConfigError(f"it ran on {result.backend}, not on the target")
            used.append((result, _predicted(result, profile)))
        except LambdaMLError as exc:
            skipped.append(f"{path.name}: {str(exc).splitlines()[0]}")
    if len(used) < MIN_JOBS:
        why = f"; skipped {'; '.join(skipped)}" if skipped else ""
        raise ConfigError(
            f"{directory}: a refit takes at least {MIN_JOBS} finished jobs of the target, found {len(used)}{why}"
        )
    factors = fit_factors([_observed(result, prediction) for result, prediction in used])
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    source = f"refit from {len(used)} finished jobs in {directory} ({when}) over the {name}"
    refit = refit_profile(profile, factors, source)
    after = [_predicted(result, refit) for result, _ in used]
    path = save_profile({**refit.to_json(), "_source": source}, out or profile_path_of(stack))
    log.info("refit profile saved to %s", path)
    return Refit(
        factors=factors,
        used=tuple(result.job_id for result, _ in used),
        skipped=tuple(skipped),
        error_before=_median_error([(p.time_s, r.wall_time_s) for r, p in used]),
        error_after=_median_error([(p.time_s, r.wall_time_s) for (r, _), p in zip(used, after, strict=True)]),
        path=path,
    )
