"""``lambdaml train``: run a job file on a backend or a stack; ``attach``: follow a stack's job started earlier.

``train`` is the part the demo shares.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text

from lambdaml.cli.output import console, errors, one_line, plural, print_json, print_result, progress
from lambdaml.errors import ConfigError, LambdaMLError

if TYPE_CHECKING:
    from lambdaml.planning import Choice, Goal
    from lambdaml.runtime.prediction_record import RanUnder
    from lambdaml.runtime.reports import JobResult
    from lambdaml.tracking import TrackedRun


def cmd_train(args: argparse.Namespace) -> int:
    from lambdaml.config import parse_job, read_job_file
    from lambdaml.driver import backend_for
    from lambdaml.planning import parse_goal, wants_choice
    from lambdaml.runtime.start import new_job_id
    from lambdaml.tracking import require_tracker

    if args.resume and args.job_id and args.resume != args.job_id:
        raise ConfigError("--resume names the job to continue; it takes no other --job-id")
    for flag, given in (("--detach", args.detach), ("--cancel-on-interrupt", args.cancel_on_interrupt)):
        if given and not args.stack:  # workers on this machine stop with this process
            raise ConfigError(f"{flag} needs --stack: only a stack's job runs on without this process")
    if args.stack and args.backend is not None:  # a stack's job runs on the stack's functions, never here
        raise ConfigError(f"--backend {args.backend} and --stack conflict: a stack's job runs on its Lambda functions")
    job_id, resume = (args.resume, True) if args.resume else (args.job_id, False)
    goal = parse_goal(args.deadline, args.budget)
    if goal is not None and args.workers is not None:
        raise ConfigError(f"--workers and --{goal.kind} conflict: the {goal.kind} chooses the worker count")
    chosen: Choice | None = None
    backend: Any
    if args.stack:
        from lambdaml.backends.stack import StackBackend, bind, resolve_stack

        stack = resolve_stack(args.stack)
        job_file = read_job_file(args.job)
        if args.workers is not None and isinstance(job_file, dict):
            job_file["workers"] = args.workers
        if args.mlflow is not None and isinstance(job_file, dict):
            job_file["tracking"] = {**(job_file.get("tracking") or {}), "mlflow": args.mlflow}
        if goal is not None or wants_choice(job_file):
            chosen = choose(goal, job_file, lambda raw: bind(dict(raw), stack), StackBackend.name, stack=stack.name)
            job_file = chosen.apply(job_file)
        job = bind(job_file, stack)
        require_tracker(job)  # before any worker starts, on every path: stack, detach, local
        backend = StackBackend(stack)
    else:
        job_file = read_job_file(args.job)
        source = str(args.job)
        if args.workers is not None and isinstance(job_file, dict):
            job_file, source = {**job_file, "workers": args.workers}, f"{args.job} with --workers"
        if goal is not None or wants_choice(job_file):
            chosen = choose(goal, job_file, lambda raw: parse_job(raw, source), args.backend or "local")
            job_file = chosen.apply(job_file)
        job = parse_job(job_file, source)
        if args.mlflow is not None:
            tracking = {**(job.tracking.model_dump() if job.tracking else {}), "mlflow": args.mlflow}
            job = parse_job({**job.model_dump(mode="json"), "tracking": tracking}, f"{args.job} with --mlflow")
        require_tracker(job)
        backend = backend_for(args.backend or "local", job)
    job_id = job_id or new_job_id(job.name)
    under = None if chosen is None else chosen.ran_under()
    if args.detach:
        return detach(backend, backend.launch(job, job_id=job_id, resume=resume), args)
    if args.stack:
        return train_on_stack(job, backend, job_id=job_id, resume=resume, args=args, under=under)
    try:
        result = train(job, backend, job_id=job_id, resume=resume, results_dir=args.results_dir, under=under)
    except KeyboardInterrupt:
        errors.print(
            f"interrupted: job {job_id} stopped; continue it with: lambdaml train {args.job} --resume {job_id}"
        )
        return 130
    return report(result, args.output)


def choose(
    goal: Goal | None, job_file: Any, bind: Callable[[Any], Any], backend: str, *, stack: str | None = None
) -> Choice:
    """The configuration for a deadline or a budget, or the advisor's recommendation for what the job
    file leaves to it (``lambdaml.planning``), said in one line before any worker starts."""
    from lambdaml.planning import choose_configuration

    chosen = choose_configuration(job_file, goal, bind, backend, stack=stack)
    progress.print(chosen.describe())
    return chosen


def train_on_stack(
    job: Any, backend: Any, *, job_id: str, resume: bool, args: argparse.Namespace, under: RanUnder | None = None
) -> int:
    """Start a stack's job and follow it; Ctrl-C while starting says so, since the job may or may not exist yet.

    Nothing is printed before the coordinator took the job: a job it refuses gets its error alone.
    """
    under = under or predicted(job, backend)
    try:
        run = backend.launch(job, job_id=job_id, resume=resume)
    except KeyboardInterrupt:
        errors.print(
            f"interrupted while starting job {job_id}; see whether it started with: "
            f"lambdaml status {job_id} --stack {args.stack}"
        )
        return 130
    announce(job, backend, job_id, "resuming" if resume else "job")
    say_unpredicted(under)
    try:
        result = follow(backend, run, results_dir=args.results_dir, ran_under=under)
    except KeyboardInterrupt:
        return interrupted(backend, job_id, args)
    return report(result, args.output)


def cmd_attach(args: argparse.Namespace) -> int:
    """Follow a stack's job started earlier (or, without --stack, one running here), ending as ``train`` would have."""
    if args.stack is None:
        from lambdaml.cli.here import attach_here

        return attach_here(args)
    from lambdaml.backends.stack import StackBackend, resolve_stack

    backend = StackBackend(resolve_stack(args.stack))
    run = backend.attach(args.job_id)
    announce(run.job, backend, args.job_id, "attached to")
    try:
        result = follow(backend, run, results_dir=args.results_dir)
    except KeyboardInterrupt:
        return interrupted(backend, args.job_id, args)
    return report(result, args.output)


def follow_commands(job_id: str, stack: str) -> tuple[str, str]:
    """The commands that follow and cancel a stack's job."""
    return f"lambdaml attach {job_id} --stack {stack}", f"lambdaml cancel {job_id} --stack {stack}"


def detach(backend: Any, run: Any, args: argparse.Namespace) -> int:
    """Say what was started and how to follow or cancel it; the job runs on in the stack."""
    job_id = run.attempt.job_id
    attach, cancel = follow_commands(job_id, args.stack)
    if args.output == "json":
        print_json({"job_id": job_id, "attempt": run.attempt.number, "attach": attach, "cancel": cancel})
        return 0
    console.print(f"job {job_id} started in stack {args.stack} (attempt {run.attempt.number})")
    console.print(f"follow it with: {attach}")
    console.print(f"cancel it with: {cancel}")
    if run.job.tracking is not None and run.job.tracking.mlflow is not None:  # logged by whoever follows it
        console.print(f"its MLflow run is logged when {attach} follows it to its end")
    return 0


def interrupted(backend: Any, job_id: str, args: argparse.Namespace) -> int:
    """Ctrl-C while following a stack's job: leave it running (say how to get back), or cancel it."""
    attach, cancel = follow_commands(job_id, args.stack)
    if not args.cancel_on_interrupt:
        errors.print(
            f"interrupted: job {job_id} goes on in stack {args.stack}; follow it with: {attach}; "
            f"cancel it with: {cancel}",
        )
        return 130
    try:
        state = backend.cancel(job_id).state
    except LambdaMLError as exc:  # e.g. interrupted before the coordinator claimed the job
        errors.print(f"interrupted: job {job_id} not cancelled: {one_line(str(exc))}")
        return 130
    errors.print(f"interrupted: job {job_id} cancelled in stack {args.stack} (state: {state})")
    return 130


def report(result: JobResult, output: str) -> int:
    """How a followed job ends on the command line, for ``train`` and ``attach`` alike."""
    if output == "json":
        print_json(result.to_json())
    else:
        from lambdaml.runtime.prediction_record import measured_against_predicted

        print_result(result)
        if result.prediction is not None and not progress.quiet:  # a detail, as the per-worker table is
            console.print(measured_against_predicted(result))
    return 0


def predicted(job: Any, backend: Any) -> RanUnder:
    """The cost model's prediction of the job, made before it starts (``lambdaml.driver.predict``)."""
    from lambdaml.driver import predict

    return predict(job, backend)


def say_unpredicted(under: RanUnder) -> None:
    """Once the job has started (one refused at its start gets its error alone): that the model could
    not predict it, and why; the job runs all the same."""
    if under.prediction is None:  # a progress line: -q leaves it out, as it does the epochs
        progress.print(f"note: {under.describe()}")


def announce(job: Any, backend: Any, job_id: str, verb: str) -> None:
    """The line a followed job starts with: what trains, where, and how it synchronizes."""
    where = plural(job.workers, "Lambda worker" if backend.name == "lambda" else "worker")
    if backend.uses_channel:
        how = f"over {job.channel.kind} ({job.sync.protocol}, {job.sync.pattern})"
    else:  # torch.distributed's collectives: no channel, and gloo's own patterns
        how = f"over gloo ({job.sync.protocol})"
    progress.print(
        Text.assemble(
            f"{verb} {job_id}: training ", (job.model.name, "bold"), f" with {job.algorithm.name} on {where} {how}"
        )
    )


def tracked_printer(run: TrackedRun) -> None:
    """Which MLflow run a tracked job was logged as."""
    progress.print(run.describe())


def follow(backend: Any, run: Any, *, results_dir: str | None, ran_under: RanUnder | None = None) -> JobResult:
    """Follow a launched run to its result, showing its epochs and progress meanwhile."""
    from lambdaml.cli.progress import progress_of
    from lambdaml.driver import follow_job

    with progress_of(run.job, backend.name, started_at=run.attempt.started_at) as shown:
        return follow_job(
            backend,
            run,
            on_event=shown.epoch,
            on_progress=shown.steps,
            results_dir=results_dir,
            on_tracked=tracked_printer,
            ran_under=ran_under,
        )


def train(
    job: Any,
    backend: Any,
    *,
    job_id: str,
    resume: bool = False,
    results_dir: str | None,
    under: RanUnder | None = None,
) -> JobResult:
    """Start a job (any backend) and follow it to its result, printing its epochs and progress.

    Nothing is printed before the job started: a job refused by the backend's checks gets its error alone.
    """
    under = under or predicted(job, backend)  # before any worker starts (a chosen job's: its choice)
    run = backend.launch(job, job_id=job_id, resume=resume)
    announce(job, backend, job_id, "resuming" if resume else "job")
    say_unpredicted(under)
    return follow(backend, run, results_dir=results_dir, ran_under=under)
