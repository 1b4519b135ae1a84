"""The Python API: ``lambdaml.train`` and ``lambdaml.load_model``, for notebooks and scripts.

The job file, the command line and this module are three doors into one path: each builds a
``JobSpec`` and hands it to the driver, which runs it on a backend of this machine or on a
stack's Lambda functions and returns its ``JobResult``. ``lambdaml train`` is a thin layer
over ``job_and_backend`` and ``lambdaml.driver``, as ``train`` here is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from lambdaml.backends import Backend, JobEvent
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec, parse_job, read_job_file
from lambdaml.data.shards import Manifest
from lambdaml.errors import ConfigError
from lambdaml.planning import Choice, Goal, choose_configuration, parse_duration, wants_choice
from lambdaml.runtime.reports import JobResult
from lambdaml.trained import TrainedModel
from lambdaml.trained import load_model as _load_model

log = logging.getLogger(__name__)

#: A job as the API takes it: a job file's path, its content as a dict, or a JobSpec.
JobSource = str | Path | Mapping[str, Any] | JobSpec

#: Called as each epoch ends on rank 0: (epoch, loss, elapsed seconds).
EpochHook = Callable[[int, float, float], None]


def job_and_backend(
    job: JobSource,
    *,
    backend: str = "local",
    stack: str | None = None,
    workers: int | None = None,
    mlflow: str | None = None,
    goal: Goal | None = None,
) -> tuple[JobSpec, Backend, Choice | None]:
    """The job with its overrides applied, and what runs it: a backend of this machine, or a stack;
    with the configuration the cost model chose, where the job leaves some to it (``goal``: for a
    deadline or a budget, else the advisor's recommendation)."""
    if isinstance(job, JobSpec):
        data: Any = job.model_dump(mode="json")
        source = f"job {job.name!r}"
    elif isinstance(job, Mapping):
        data, source = dict(job), "job"
    else:
        data, source = read_job_file(job), str(job)
    overridden = [flag for flag, value in (("workers", workers), ("mlflow", mlflow)) if value is not None]
    if overridden and not isinstance(data, dict):
        return parse_job(data, source), _never(), None  # parse_job reports the shape error
    if workers is not None:
        data = {**data, "workers": workers}
    if mlflow is not None:
        data = {**data, "tracking": {**dict(data.get("tracking") or {}), "mlflow": mlflow}}
    if overridden:
        source = f"{source} with {', '.join(f'--{flag}' for flag in overridden)}"
    chosen = None
    if stack is not None:
        from lambdaml.backends.stack import StackBackend, bind, resolve_stack

        found = resolve_stack(stack)
        if goal is not None or wants_choice(data):
            chosen = _choose(data, goal, lambda raw: bind(dict(raw), found, source), StackBackend.name, stack)
            data = chosen.apply(data)
        return bind(data, found, source), StackBackend(found), chosen
    from lambdaml.driver import backend_for

    if goal is not None or wants_choice(data):
        chosen = _choose(data, goal, lambda raw: parse_job(raw, source), backend, None)
        data = chosen.apply(data)
    spec = parse_job(data, source)
    return spec, backend_for(backend, spec), chosen


def _choose(data: Any, goal: Goal | None, bind: Any, backend: str, stack: str | None) -> Choice:
    chosen = choose_configuration(data, goal, bind, backend, stack=stack)
    log.info("%s", chosen.describe())
    return chosen


def _never() -> Backend:
    raise ConfigError("a job must be a mapping of its parts")  # not reached: parse_job raised first


def train(
    job: JobSource,
    *,
    backend: str = "local",
    stack: str | None = None,
    workers: int | None = None,
    job_id: str | None = None,
    resume: str | None = None,
    mlflow: str | None = None,
    results_dir: str | Path | None = None,
    on_epoch: EpochHook | None = None,
    deadline: str | float | None = None,
    budget: float | None = None,
) -> JobResult:
    """Run a job to its end and return its result (the model's location, loss curve, time and cost).

    ``backend``: ``local`` (worker processes, as Lambda would run them) or ``iaas-local``
    (torchrun and gloo); ``stack``: run on that deployed (or ``lambdaml local up``) stack's
    Lambda functions instead. ``resume`` continues an interrupted job by its id. ``mlflow``
    logs the run to that tracking URI. The result is also written to ``results_dir`` if given.
    ``deadline`` (seconds, or "10m") or ``budget`` (dollars): the cost model chooses what the job
    leaves as ``auto`` (workers, runtime.memory_mb, channel) to meet it; without either, as the
    advisor recommends. The result records the prediction it ran under.
    """
    from lambdaml.driver import run_job
    from lambdaml.runtime.start import new_job_id

    if resume is not None and job_id is not None and resume != job_id:
        raise ConfigError("resume names the job to continue; it takes no other job_id")
    if deadline is not None and budget is not None:
        raise ConfigError("give deadline or budget, not both")
    goal = None
    if deadline is not None:
        seconds = deadline if isinstance(deadline, int | float) else parse_duration(deadline, "deadline")
        if not seconds > 0:
            raise ConfigError(f"deadline must be positive, got {deadline!r}")
        goal = Goal(deadline_s=float(seconds))
    elif budget is not None:
        if not budget > 0:
            raise ConfigError(f"budget must be positive dollars, got {budget!r}")
        goal = Goal(budget=float(budget))
    spec, runner, chosen = job_and_backend(job, backend=backend, stack=stack, workers=workers, mlflow=mlflow, goal=goal)

    def on_event(event: JobEvent) -> None:
        if on_epoch is not None and event.rank == 0:
            on_epoch(event.epoch, event.loss, event.elapsed_s)

    return run_job(
        spec,
        job_id=resume or job_id or new_job_id(spec.name),
        backend=runner,
        resume=resume is not None,
        under=None if chosen is None else chosen.ran_under(),
        on_event=on_event,
        results_dir=results_dir,
    )


def prepare_dataset(
    name: str,
    input: str | Path | Sequence[str | Path],
    *,
    shards: int,
    test: str | Path | None = None,
    storage: StorageSpec | None = None,
    stack: str | None = None,
    format: str | None = None,
    label: str | None = None,
    features: Sequence[str] | None = None,
    label_column: Literal["first", "last"] = "first",
    sparse: bool = False,
    test_fraction: float | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> Manifest:
    """Cut a data file (local or ``s3://``; LIBSVM, CSV, NPZ, Parquet) into shards in the data bucket.

    ``test`` is a test file read with the train file's width, classes and columns; without it,
    ``test_fraction`` of the rows (default 0.2) is held out. The same as ``lambdaml data prepare``.
    """
    from lambdaml.data.prepare import DatasetSource
    from lambdaml.data.prepare import prepare_dataset as prepare

    if stack is not None and storage is not None:
        raise ConfigError("give the data bucket as storage or as stack, not both")
    paths = (input,) if isinstance(input, str | Path) else tuple(input)
    source = DatasetSource(
        inputs=tuple(str(p) for p in paths),
        format=format,
        test=None if test is None else str(test),
        label_column=label_column,
        label=label,
        features=None if features is None else tuple(features),
        sparse=sparse,
    )
    where = storage if storage is not None else storage_of(stack=stack)
    return prepare(where, name, source, shards=shards, test_fraction=test_fraction, seed=seed, overwrite=overwrite)


def storage_of(
    *, stack: str | None = None, bucket: str | None = None, endpoint_url: str | None = None, region: str | None = None
) -> StorageSpec:
    """A data bucket: a stack's, or the one named (default: lambdaml-data on AWS)."""
    if stack is not None:
        from lambdaml.backends.stack import resolve_stack

        found = resolve_stack(stack)
        bucket, endpoint_url, region = found.output("DataBucketName"), found.endpoints.get("s3"), found.region
    given = {"bucket": bucket, "endpoint_url": endpoint_url, "region": region}
    return StorageSpec.model_validate({name: value for name, value in given.items() if value is not None})


def load_model(
    source: str | JobResult, *, storage: StorageSpec | Channel | None = None, stack: str | None = None
) -> TrainedModel:
    """A finished job's model: by job id, by its ``JobResult``, or by its ``s3://…/jobs/ID/model`` URI.

    ``storage`` is the data bucket the job ran on (a JobResult knows its own); ``stack`` takes
    that stack's data bucket.
    """
    if stack is not None:
        if storage is not None:
            raise ConfigError("give the data bucket as storage or as stack, not both")
        storage = storage_of(stack=stack)
    return _load_model(source, storage=storage)


__all__ = ["EpochHook", "JobSource", "job_and_backend", "load_model", "prepare_dataset", "storage_of", "train"]
