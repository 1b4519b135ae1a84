"""The prediction a job runs under: the cost model's time and cost for the job as written, made before it starts.

A result records it beside what the run measured, so ``compare`` and ``jobs`` can say how far
the model was off. Jobs on this machine are predicted from its calibrated profile
(``lambdaml calibrate`` saved as ``LAMBDAML_HOME/profiles/local.json``), a stack's jobs from the
stack's (``profiles/STACK.json``), either one over the shipped AWS defaults, which serve alone
where no profile was calibrated. The model is advice: a job it cannot predict (a model or
channel it does not know, a manifest it cannot read) runs all the same, its result saying why
there is no prediction.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lambdaml import catalogue, settings
from lambdaml.config import JobSpec
from lambdaml.config.algorithm import LocalTrainingSpec
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.runtime.reports import JobResult, PredictedRun

if TYPE_CHECKING:
    from analytic_model import Prediction, Profile, Workload
    from lambdaml.data.shards import Manifest

log = logging.getLogger(__name__)

#: What the result's profile field says where no calibrated profile was found.
AWS_DEFAULTS = "shipped AWS defaults"


@dataclass(frozen=True)
class RanUnder:
    """A job's prediction, or why it has none (exactly one of the two)."""

    prediction: PredictedRun | None = None
    unpredicted: str | None = None

    def recorded_in(self, result: JobResult) -> JobResult:
        """The result with the prediction it ran under (or the reason it had none)."""
        return replace(result, prediction=self.prediction, unpredicted=self.unpredicted)

    def describe(self) -> str:
        """One line: the prediction with its ranges and profile, or why there is none."""
        if self.prediction is None:
            return f"no prediction for this job: {self.unpredicted}"
        return f"predicted: {describe_prediction(self.prediction)}"


def describe_prediction(p: PredictedRun) -> str:
    """A prediction in words: its time and cost with their ranges, its configuration and profile."""
    from analytic_model.advisor import format_money, format_time

    return (
        f"{format_time(p.time_s)} ({format_time(p.time_low_s)}-{format_time(p.time_high_s)}), "
        f"{format_money(p.cost)} ({format_money(p.cost_low)}-{format_money(p.cost_high)}) "
        f"for {p.configuration}, from the {p.profile}"
    )


def profile_path_of(stack: str | None) -> Path:
    """Where the target's calibrated profile is kept: the stack's, or this machine's (``local``)."""
    return settings.home() / "profiles" / f"{stack or 'local'}.json"


def profile_for(stack: str | None) -> tuple[Profile, str]:
    """The profile a job is predicted from, and how the result names it: the target's calibrated one
    (this machine's, or the stack's) over the AWS defaults, or the defaults alone."""
    from analytic_model import aws_profile, load_profile

    path = profile_path_of(stack)
    if path.is_file():
        return load_profile(path), f"calibrated profile {path}"
    return aws_profile(), AWS_DEFAULTS


def workload_of(job: JobSpec, manifest: Manifest) -> Workload:
    """The cost model's workload of a job on its dataset: what ``advise --job`` reads from them."""
    from analytic_model import Workload

    spec = job.algorithm
    compression = spec.compression_spec
    return Workload(
        model=job.model.name,
        dataset_bytes=float(sum(manifest.shard_bytes)),
        samples=manifest.train_rows,
        features=manifest.n_features,
        k=job.model.k,
        algorithm=spec.name,
        batch_size=spec.batch_size,
        epochs=float(spec.epochs),
        local_epochs=spec.local_epochs if isinstance(spec, LocalTrainingSpec) else 1,
        optimizer=spec.optimizer,
        sparse=manifest.format == "csr",
        classes=manifest.n_classes or 2,
        compression=None if compression is None else compression.name,
        levels=16 if compression is None else compression.levels,
        ratio=0.01 if compression is None else compression.ratio,
        error_feedback=None if compression is None else compression.error_feedback,
        warmup_steps=int(getattr(spec, "warmup_steps", 100)),
        protocol=job.sync.protocol,
        staleness=job.sync.staleness,
    )


def predict_job(
    job: JobSpec, workload: Workload, profile: Profile, backend: str, *, workers: int | None = None
) -> Prediction:
    """The model's prediction of ``job`` as its backend runs it: Lambda workers (a stack's, or this
    machine's processes standing in for them) over its channel, or EC2 instances for an IaaS
    backend. A pattern of ``auto`` is the fastest pattern predicted, as the workers would choose."""
    from analytic_model import predict_faas, predict_iaas

    count = job.workers if workers is None else workers
    if backend.startswith("iaas"):
        return predict_iaas(workload, count, job.iaas.instance_type, profile, region=job.storage.region)
    patterns = list(catalogue.PATTERNS) if job.sync.pattern == "auto" else [job.sync.pattern]
    found: list[Prediction] = []
    why, region = "", job.storage.region
    for pattern in patterns[:1] if count == 1 else patterns:
        try:
            memory = job.runtime.memory_mb
            found.append(predict_faas(workload, count, job.channel.kind, pattern, memory, profile, region=region))
        except ConfigError as exc:  # a pattern this job cannot take (compression and the 2-D grid)
            why = str(exc)
    if not found:
        raise ConfigError(why or "no pattern to predict")
    return min(found, key=lambda p: p.time_s)


def recorded(prediction: Prediction, profile_name: str, workload: Workload | None = None) -> PredictedRun:
    """A prediction as a result records it, with the workload it was made for."""
    low, high = prediction.time_range_s
    cost_low, cost_high = prediction.cost_range
    return PredictedRun(
        workload=None if workload is None else asdict(workload),
        configuration=prediction.label,
        profile=profile_name,
        time_s=prediction.time_s,
        time_low_s=low,
        time_high_s=high,
        cost=prediction.cost,
        cost_low=cost_low,
        cost_high=cost_high,
    )


def ran_under(job: JobSpec, backend: str, *, stack: str | None = None) -> RanUnder:
    """The prediction of a job before it starts, or why it has none; never an error."""
    from lambdaml.data.shards import read_manifest
    from lambdaml.storage import open_storage

    try:
        profile, name = profile_for(stack)
        manifest = read_manifest(open_storage(job.storage), job.dataset)
        workload = workload_of(job, manifest)
        return RanUnder(prediction=recorded(predict_job(job, workload, profile, backend), name, workload))
    except LambdaMLError as exc:
        return RanUnder(unpredicted=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except Exception as exc:  # the model is advice: no fault of its may stop a job
        log.debug("prediction failed", exc_info=True)
        return RanUnder(unpredicted=f"the cost model failed ({type(exc).__name__}: {exc})")


@dataclass(frozen=True)
class PredictionError:
    """How a run's measured time and cost compare with the prediction it ran under."""

    time_ratio: float  # measured over predicted
    cost_ratio: float | None  # None where the prediction cost nothing
    time_in_range: bool
    cost_in_range: bool

    def describe(self) -> str:
        """``1.23``: the measured time over the predicted; ``!`` after it where it fell outside the range."""
        return f"{self.time_ratio:.2f}" + ("" if self.time_in_range else "!")


def prediction_error(result: JobResult) -> PredictionError | None:
    """The result's measured time and cost against its prediction; None where it has none."""
    p = result.prediction
    if p is None or p.time_s <= 0:
        return None
    measured_s = result.attempts_wall_time_s or result.wall_time_s  # a resumed job's: all its attempts
    dollars = result.cost.get("total_dollars")
    measured_cost = float(dollars) if isinstance(dollars, int | float) else None
    return PredictionError(
        time_ratio=measured_s / p.time_s,
        cost_ratio=None if measured_cost is None or p.cost <= 0 else measured_cost / p.cost,
        time_in_range=p.time_low_s <= measured_s <= p.time_high_s,
        cost_in_range=measured_cost is not None and p.cost_low <= measured_cost <= p.cost_high,
    )


def measured_against_predicted(result: JobResult) -> str:
    """One line: the prediction the job ran under, and its measured time and cost as multiples of it."""
    p, error = result.prediction, prediction_error(result)
    if p is None or error is None:
        return f"no prediction for this job: {result.unpredicted or 'none was recorded'}"
    cost = "" if error.cost_ratio is None else f", {error.cost_ratio:.2f}x the cost"
    inside = [name for name, ok in (("time", error.time_in_range), ("cost", error.cost_in_range)) if ok]
    within = f"; within its range: {' and '.join(inside)}" if inside else "; outside its ranges"
    return f"predicted {describe_prediction(p)}; measured {error.time_ratio:.2f}x the time{cost}{within}"
