"""The job driver: the one path every job takes, whatever runs its workers.

A backend (local processes, torchrun, a stack) launches the job and waits for its result;
the driver adds what is the same for all: the result file on disk.
"""

from __future__ import annotations

from pathlib import Path

from lambdaml.backends import BACKENDS, Backend, EventCallback, Run
from lambdaml.config import JobSpec
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.results import save_result


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
) -> JobResult:
    """Run a job to the end and return its result record (also in the data bucket, and on disk).

    Its state is recorded as it goes; a failure or an interrupt (Ctrl-C) of workers on this
    machine is recorded too, so ``--resume`` can continue the job from its checkpoints.
    """
    runner = backend if isinstance(backend, Backend) else backend_for(backend, job)
    run = runner.launch(job, job_id=job_id, resume=resume)
    return follow_job(runner, run, on_event=on_event, results_dir=results_dir)


def follow_job(
    backend: Backend, run: Run, *, on_event: EventCallback | None = None, results_dir: str | Path | None = "results"
) -> JobResult:
    """Follow a launched run (this process's, or one ``lambdaml attach`` found) to its result on disk."""
    return save_result(backend.wait(run, on_event=on_event), results_dir)
