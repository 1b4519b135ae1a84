"""The job driver: the one path every job takes, whatever runs its workers.

A backend (local processes, torchrun, a stack) launches the job and waits for its result;
the driver adds what is the same for all: the result file on disk, and the job's MLflow run
(``tracking.mlflow``), logged once the job has ended.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lambdaml.backends import BACKENDS, Backend, EventCallback, ProgressCallback, Run
from lambdaml.config import JobSpec
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.results import check_results_dir, save_result
from lambdaml.tracking import TrackedRun, require_tracker, track_run

#: Told which MLflow run a tracked job was logged as (the command line prints it).
TrackedCallback = Callable[[TrackedRun], None]


def backend_for(name: str, job: JobSpec) -> Backend:
    """A backend of this machine by name (``local``, ``iaas-local``), keeping its records in the job's storage."""
    return BACKENDS.get(name)(job.storage)


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
) -> JobResult:
    """Run a job to the end and return its result record (also in the data bucket, and on disk).

    Its state is recorded as it goes; a failure or an interrupt (Ctrl-C) of workers on this
    machine is recorded too, so ``--resume`` can continue the job from its checkpoints.
    """
    require_tracker(job)  # a job that asks for MLflow fails here, before any worker starts
    check_results_dir(results_dir)  # as does one whose result could not be written at the end
    runner = backend if isinstance(backend, Backend) else backend_for(backend, job)
    run = runner.launch(job, job_id=job_id, resume=resume)
    return follow_job(
        runner, run, on_event=on_event, results_dir=results_dir, on_tracked=on_tracked, on_progress=on_progress
    )


def follow_job(
    backend: Backend,
    run: Run,
    *,
    on_event: EventCallback | None = None,
    results_dir: str | Path | None = "results",
    on_tracked: TrackedCallback | None = None,
    on_progress: ProgressCallback | None = None,
) -> JobResult:
    """Follow a launched run (this process's, or one ``lambdaml attach`` found) to its result on disk,
    then log it to MLflow if the job asks (a tracker's failure is a warning; the result stands)."""
    result = save_result(backend.wait(run, on_event=on_event, on_progress=on_progress), results_dir)
    if result.result_path is not None:
        backend.saved(run, result)
    tracked = track_run(run.job, result, storage=run.job.storage)
    if tracked is not None and on_tracked is not None:
        on_tracked(tracked)
    return result
