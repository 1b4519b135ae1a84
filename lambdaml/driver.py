"""The job driver: the one path every job takes, whatever runs its workers.

A backend (local processes, torchrun, a stack) launches the job and waits for its result;
the driver adds what is the same for all: the cost model's prediction, made before the job
starts and recorded in its result beside what was measured (``runtime.prediction_record``); the
result file on disk; and the job's MLflow run (``tracking.mlflow``), logged once the job has ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from lambdaml.backends import BACKENDS, Backend, EventCallback, ProgressCallback, Run
from lambdaml.config import JobSpec
from lambdaml.runtime.prediction_record import RanUnder, ran_under
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.results import check_results_dir, save_result
from lambdaml.tracking import TrackedRun, require_tracker, track_run

log = logging.getLogger(__name__)

#: Told which MLflow run a tracked job was logged as (the command line prints it).
TrackedCallback = Callable[[TrackedRun], None]


def backend_for(name: str, job: JobSpec) -> Backend:
    """A backend of this machine by name (``local``, ``iaas-local``), keeping its records in the job's storage."""
    return BACKENDS.get(name)(job.storage)


def predict(job: JobSpec, backend: Backend) -> RanUnder:
    """The prediction ``job`` runs under on ``backend``, from the profile calibrated for where it
    runs (this machine, or the stack), or why there is none."""
    stack = getattr(getattr(backend, "stack", None), "name", None)
    return ran_under(job, backend.name, stack=stack if isinstance(stack, str) else None)


def run_job(
    job: JobSpec,
    *,
    job_id: str | None = None,
    backend: str | Backend = "local",
    on_event: EventCallback | None = None,
    results_dir: str | Path | None = "results",
    resume: bool = False,
    on_tracked: TrackedCallback | None = None,
    on_progress: ProgressCallback | None = None,
    under: RanUnder | None = None,
) -> JobResult:
    """Run a job to the end and return its result record (also in the data bucket, and on disk).

    Its state is recorded as it goes; a failure or an interrupt (Ctrl-C) of workers on this
    machine is recorded too, so ``--resume`` can continue the job from its checkpoints.
    ``under``: the prediction it was configured by (``lambdaml.planning``); else it is predicted here.
    """
    require_tracker(job)  # a job that asks for MLflow fails here, before any worker starts
    check_results_dir(results_dir)  # as does one whose result could not be written at the end
    runner = backend if isinstance(backend, Backend) else backend_for(backend, job)
    under = under or predict(job, runner)  # before any worker starts; a job it cannot predict runs all the same
    run = runner.launch(job, job_id=job_id, resume=resume)
    if under.prediction is None:  # the job is unaffected, and its result says why: information, not a warning
        log.info("%s", under.describe())
    return follow_job(
        runner,
        run,
        on_event=on_event,
        results_dir=results_dir,
        on_tracked=on_tracked,
        on_progress=on_progress,
        ran_under=under,
    )


def follow_job(
    backend: Backend,
    run: Run,
    *,
    on_event: EventCallback | None = None,
    results_dir: str | Path | None = "results",
    on_tracked: TrackedCallback | None = None,
    on_progress: ProgressCallback | None = None,
    ran_under: RanUnder | None = None,
) -> JobResult:
    """Follow a launched run (this process's, or one ``lambdaml attach`` found) to its result on disk,
    then log it to MLflow if the job asks (a tracker's failure is a warning; the result stands).

    ``ran_under``: the prediction made before the job started, recorded in its result. A run
    ``attach`` found has none here: its result stays as its job recorded it, not predicted after the fact."""
    finished = backend.wait(run, on_event=on_event, on_progress=on_progress)
    if ran_under is not None:
        finished = ran_under.recorded_in(finished)
        backend.predicted(finished)
    result = save_result(finished, results_dir)
    if result.result_path is not None:
        backend.saved(run, result)
    tracked = track_run(run.job, result, storage=run.job.storage)
    if tracked is not None and on_tracked is not None:
        on_tracked(tracked)
    return result
