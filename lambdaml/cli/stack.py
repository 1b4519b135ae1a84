"""Job commands against a stack or a bucket: ``status``, ``jobs``, ``logs``, ``cancel`` and ``clean``.

Without ``--stack`` (or, for ``jobs``, the storage options) a job command looks only at the
jobs this machine ran (``cli.here``), and says where it looked.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from lambdaml.cli.follow import EXIT_ENDED_BADLY, follow_lines
from lambdaml.cli.here import cancel_here, jobs_here, logs_here, status_here
from lambdaml.cli.output import (
    console,
    cost_text,
    errors,
    jobs_table,
    one_line,
    plural,
    print_json,
    print_json_line,
    progress,
    status_table,
)
from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.backends.base import WorkerProgress
    from lambdaml.backends.stack import StackBackend
    from lambdaml.channels import Channel
    from lambdaml.platforms.base import LogLine
    from lambdaml.runtime.registry import JobRegistry
    from lambdaml.runtime.status import JobStatus


def cmd_status(args: argparse.Namespace) -> int:
    if args.stack is None:
        return status_here(args)
    from lambdaml.backends.stack import StackBackend, resolve_stack

    backend = StackBackend(resolve_stack(args.stack))
    if args.watch:
        return watch_status(backend, args)
    show_status(args.job_id, *backend.status(args.job_id), args.output)
    return 0


def show_status(job_id: str, record: JobStatus, workers: WorkerProgress, output: str, *, lines: bool = False) -> None:
    """A job's state and heartbeats: a table, one JSON document (the state record as stored, and its
    workers' progress), or (``lines``) one JSON line."""
    if output == "json":
        (print_json_line if lines else print_json)({**record.to_json(), **workers})
        return
    cost = f"; cost {cost_text(record.cost_dollars, record.cost_estimated)}" if record.cost_dollars is not None else ""
    if cost and record.cost_estimated:
        cost += ", estimated from the workers' run time"
    console.print(f"job {job_id}: {record.state}" + (f" ({record.error})" if "error" in record else "") + cost)
    if workers["heartbeats"]:
        console.print(status_table(workers))


def watch_status(backend: StackBackend, args: argparse.Namespace) -> int:
    """Show the status each time it changes, until the job ends; bounded like ``watch`` when nothing moves."""
    from lambdaml.backends.base import known_state, worker_progress
    from lambdaml.runtime import records

    store = backend.store()  # one client, and the spec read once, for every look
    known_state(store, args.job_id)
    job = records.stored_job(store, args.job_id)
    limit = job.sync.timeout_s + 60
    last_seen, last_change = None, time.monotonic()
    try:
        while True:
            record = records.status(store, args.job_id)
            workers = worker_progress(store, args.job_id, job, record.attempt)
            seen = (record.state, record.updated_at, [(h["rank"], h["epoch"]) for h in workers["heartbeats"]])
            if seen != last_seen:
                last_seen, last_change = seen, time.monotonic()
                show_status(args.job_id, record, workers, args.output, lines=True)
            state = record.state
            if state in records.ENDED:
                return 0 if state == records.SUCCEEDED else EXIT_ENDED_BADLY
            if time.monotonic() - last_change > limit:
                raise ConfigError(f"job {args.job_id} made no progress for {limit:g}s (state: {state})")
            time.sleep(args.interval)
    except KeyboardInterrupt:
        errors.print(f"stopped watching; job {args.job_id} goes on in stack {args.stack}")
        return 130


def cmd_jobs(args: argparse.Namespace) -> int:
    """The jobs this machine ran, or a stack's registry's, or a data bucket's (by the storage options), newest first."""
    from lambdaml.runtime import records

    if not (args.stack or args.bucket or args.endpoint_url or args.region):
        return jobs_here(args)  # nothing asked of AWS: nothing sent to it
    if args.stack:  # a stack names its own registry and bucket: a storage option beside it would be ignored
        options = {"--bucket": args.bucket, "--endpoint-url": args.endpoint_url, "--region": args.region}
        given = next((flag for flag, value in options.items() if value is not None), None)
        if given is not None:
            raise ConfigError(f"{given} and --stack conflict: --stack lists the stack's own jobs")
    now = time.time()
    registry, where = job_registry(args)
    summaries = records.job_summaries(registry, now=now, state=args.state)
    if args.output == "json":
        print_json(summaries)
    elif summaries:
        progress.print(f"jobs in {where}:")
        console.print(jobs_table(summaries, now=now))
    else:
        console.print("no jobs" + (f" {args.state}" if args.state else "") + f" in {where}")
    return 0


def job_registry(args: argparse.Namespace) -> tuple[JobRegistry, str]:
    """A stack's JobsTable, or the records in the data bucket the storage options name; and where, in words."""
    from lambdaml.cli.data import _storage
    from lambdaml.runtime.registry import BucketRegistry, TableRegistry
    from lambdaml.storage import open_storage

    if args.stack:
        from lambdaml.backends.stack import resolve_stack, stack_store

        stack = resolve_stack(args.stack)
        table = stack.output("JobsTableName")
        registry = TableRegistry(stack.client(TableRegistry.SERVICE), table, bucket=stack_store(stack))
        return registry, f"stack {args.stack}"
    named = argparse.Namespace(**{**vars(args), "bucket": args.bucket or "lambdaml-data"})
    named.region = args.region or "us-east-1"
    storage = _storage(named)
    where = f"s3://{storage.bucket}/" + (f" at {storage.endpoint_url}" if storage.endpoint_url else "")
    return BucketRegistry(open_storage(storage)), where


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove what ended jobs left in their bucket and on their channels; records, results and models stay."""
    from lambdaml.cli.data import _storage
    from lambdaml.runtime import machine_jobs, records
    from lambdaml.storage import open_storage

    spec = _storage(args)
    store = open_storage(spec)
    if not args.dry_run:  # a job this machine ran whose process is gone has ended: say so, then clean it
        for job_id in machine_jobs.orphans_in(spec.bucket):
            machine_jobs.interrupt_if_owner_gone(store, job_id, spec.bucket)
    ended = records.ended_jobs(store, older_than_s=args.older_than)
    objects = records.clean_jobs(store, ended, dry_run=args.dry_run, results=args.results)
    channel_keys = clean_channels(store, ended, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for job_id in sorted(set(objects) | set(channel_keys)):
        on_channel = f" and {plural(channel_keys[job_id], 'channel key')}" if job_id in channel_keys else ""
        console.print(f"job {job_id}: {verb} {plural(objects.get(job_id, 0), 'object')}{on_channel}")
    console.print(
        f"{verb} {plural(sum(objects.values()), 'object')} and {plural(sum(channel_keys.values()), 'channel key')} "
        f"of {plural(len(ended), 'ended job')}; results and models {'too' if args.results else 'kept'}"
    )
    return 0


def clean_channels(store: Channel, ended: list[str], *, dry_run: bool) -> dict[str, int]:
    """Each ended job's keys left on its channel; a channel out of reach (a VPC's cache, say) is named once."""
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime import records
    from lambdaml.runtime.results import channel_residue

    found: dict[str, int] = {}
    unreachable: set[str] = set()
    for job_id in ended:
        try:
            job = records.stored_job(store, job_id)
        except LambdaMLError:
            continue  # no spec to say where its channel is (a record from before specs were kept)
        spec = job.channel
        where = f"the {spec.kind} channel {spec.place}"
        if where in unreachable:
            continue
        try:
            count = channel_residue(job, job_id, dry_run=dry_run, still_ended=_still_ended(store, job_id))
        except LambdaMLError as exc:
            unreachable.add(where)
            errors.print(f"warning: {where} is out of reach ({one_line(str(exc))}); its keys stay")
            continue
        if count:
            found[job_id] = count
    return found


def _still_ended(store: Channel, job_id: str) -> Callable[[int], bool]:
    """Whether an attempt of the job has still ended, asked of its state record right before a delete."""
    from lambdaml.runtime import records

    return lambda attempt: records.attempt_ended(store, job_id, attempt)


def cmd_logs(args: argparse.Namespace) -> int:
    """A job's worker lines, by time, each with its rank (a stack's from CloudWatch Logs); --follow to its end."""
    if args.stack is None:
        return logs_here(args)
    from lambdaml.backends.stack import resolve_stack, stack_store
    from lambdaml.backends.stack_watch import job_of, status_of

    stack = resolve_stack(args.stack)
    store = stack_store(stack)
    status_of(store, args.job_id)  # an unknown job is one line
    limit = job_of(store, args.job_id).sync.timeout_s + 60  # as watch bounds a job that stopped moving
    seen: set[str] = set()

    def new_lines() -> list[LogLine]:
        fresh = [line for line in stack.job_logs(args.job_id) if line.event_id not in seen]
        seen.update(line.event_id for line in fresh)
        return fresh

    follow_lines(args, new_lines, lambda: status_of(store, args.job_id).state, limit=limit)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    if args.stack is None:
        return cancel_here(args)
    from lambdaml.backends.stack import StackBackend, resolve_stack

    status = StackBackend(resolve_stack(args.stack)).cancel(args.job_id)
    if args.output == "json":
        print_json(status.to_json())
    else:
        console.print(f"job {args.job_id}: {status.state}")
    return 0
