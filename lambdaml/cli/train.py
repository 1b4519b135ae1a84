"""``lambdaml train``: run a job file on a backend or a stack; ``train`` is the part the demo shares."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.text import Text

from lambdaml.cli.output import errors, print_json, print_result, progress
from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.runtime.reports import JobResult


def cmd_train(args: argparse.Namespace) -> int:
    from lambdaml.config import load_job, parse_job, read_job_file
    from lambdaml.driver import backend_for
    from lambdaml.runtime.start import new_job_id

    if args.resume and args.job_id and args.resume != args.job_id:
        raise ConfigError("--resume names the job to continue; it takes no other --job-id")
    job_id, resume = (args.resume, True) if args.resume else (args.job_id, False)
    backend: Any
    if args.stack:
        from lambdaml.backends.stack import StackBackend, bind, resolve_stack

        stack = resolve_stack(args.stack)
        job_file = read_job_file(args.job)
        if args.workers is not None and isinstance(job_file, dict):
            job_file["workers"] = args.workers
        job, backend = bind(job_file, stack), StackBackend(stack)
    else:
        job = load_job(args.job)
        if args.workers is not None:
            job = parse_job({**job.model_dump(mode="json"), "workers": args.workers}, f"{args.job} with --workers")
        backend = backend_for(args.backend, job)
    job_id = job_id or new_job_id(job.name)
    try:
        result = train(job, backend, job_id=job_id, resume=resume, results_dir=args.results_dir)
    except KeyboardInterrupt:
        if args.stack:
            errors.print(
                f"interrupted: job {job_id} goes on in stack {args.stack}; "
                f"stop it with: lambdaml cancel {job_id} --stack {args.stack}"
            )
        else:
            errors.print(
                f"interrupted: job {job_id} stopped; continue it with: lambdaml train {args.job} --resume {job_id}"
            )
        return 130
    if args.output == "json":
        print_json(result.to_json())
    else:
        print_result(result)
    return 0


def train(job: Any, backend: Any, *, job_id: str, resume: bool = False, results_dir: str | None) -> JobResult:
    """Run a job through the driver (any backend), printing rank 0's epochs as they end."""
    from lambdaml.backends import JobEvent
    from lambdaml.driver import run_job

    epochs = job.algorithm.epochs
    where = f"{job.workers} workers" if backend.name != "lambda" else f"{job.workers} Lambda workers"
    progress.print(
        Text.assemble(
            f"{'resuming' if resume else 'job'} {job_id}: training ",
            (job.model.name, "bold"),
            f" with {job.algorithm.name} on {where} over {job.channel.kind} ({job.sync.protocol}, {job.sync.pattern})",
        )
    )

    def on_event(event: JobEvent) -> None:
        if event.rank == 0:  # the loss is global; one line per epoch
            progress.print(f"  epoch {event.epoch:>3}/{epochs}  loss {event.loss:.5f}  {event.elapsed_s:7.2f}s")

    return run_job(job, job_id=job_id, backend=backend, resume=resume, on_event=on_event, results_dir=results_dir)
