"""Jobs (``lambdaml jobs``, ``status``, ``logs``, ``cancel``, and ``attach`` without a stack) and the local stack.

Without ``--stack`` (or, for ``jobs``, the storage options) a job command looks only at the
jobs this machine ran (``runtime.machine_jobs``), and says where it looked.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from lambdaml.cli.output import (
    console,
    cost_text,
    errors,
    jobs_table,
    one_line,
    plural,
    print_json,
    print_json_line,
    print_result,
    progress,
    status_table,
)
from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.runtime.machine_jobs import MachineJob
    from lambdaml.runtime.registry import JobRegistry
    from lambdaml.runtime.reports import JobResult


def cmd_local(args: argparse.Namespace) -> int:
    from lambdaml.local import stack

    if args.local_command == "up":
        parameters = dict(_key_value(item) for item in args.parameter)
        record = stack.up(
            args.name,
            cache=args.cache,
            parameters=parameters,
            account_concurrency=args.account_concurrency,
            torch=args.torch,
            port=args.port,
        )
        console.print(f"local stack {args.name!r} is up:")
        for service, url in sorted(record["endpoints"].items()):
            console.print(f"  {service:<15} {url}")
        for key, value in sorted(record["outputs"].items()):
            console.print(f"  {key:<15} {value}")
        console.print(f"train on it with: lambdaml train JOB.yaml --stack {args.name}")
    elif args.local_command == "status":
        return local_status(args)
    else:
        stopped = stack.down(args.name)
        console.print(f"local stack {args.name!r} is down ({plural(len(stopped), 'process', 'processes')} stopped)")
    return 0


def local_status(args: argparse.Namespace) -> int:
    """What ``local up`` recorded of a stack, and whether it still answers: where to reach it and its logs."""
    from lambdaml.backends.stack import local_record, local_stack_names, refusing_endpoint

    record = local_record(args.name)
    if record is None:
        known = ", ".join(local_stack_names()) or "none"
        raise ConfigError(f"no local stack named {args.name!r}; local stacks: {known}")
    down = refusing_endpoint(record)
    workdir = Path(record["workdir"])
    functions = [
        {
            "function": f["name"],
            "logical": f["logical"],
            "log_file": str(workdir / f"{f['name']}.log"),
            "log_group": f.get("log_group", ""),
        }
        for f in record.get("functions", [])
    ]
    status = {
        "name": args.name,
        "up": down is None,
        "endpoints": record["endpoints"],
        "ports": {service: urlparse(url).port for service, url in record["endpoints"].items()},
        "cache": record.get("outputs", {}).get("CacheEndpoint"),
        "functions": functions,
        "invocations": str(workdir / "invocations.jsonl"),
        "workdir": str(workdir),
    }
    if args.output == "json":
        print_json(status)
        return 0
    state = "up" if down is None else f"down (nothing answers at {down})"
    console.print(f"local stack {args.name!r} is {state}")
    for service, url in sorted(record["endpoints"].items()):
        console.print(f"  {service:<15} {url}")
    if status["cache"]:
        console.print(f"  {'cache':<15} {status['cache']} ({record.get('cache')})")
    for f in functions:
        console.print(f"{f['logical']}: {f['function']}")
        console.print(f"  log file   {f['log_file']}")
        console.print(f"  log group  {f['log_group'] or '-'}")
    console.print(f"invocations: {status['invocations']}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    if args.stack is None:
        return status_here(args)
    from lambdaml.backends.stack import StackBackend, resolve_stack

    backend = StackBackend(resolve_stack(args.stack))
    if args.watch:
        return watch_status(backend, args)
    show_status(args.job_id, backend.status(args.job_id), args.output)
    return 0


def show_status(job_id: str, status: dict[str, Any], output: str, *, lines: bool = False) -> None:
    """A job's state and heartbeats: a table, one JSON document, or (``lines``) one JSON line."""
    if output == "json":
        (print_json_line if lines else print_json)(status)
        return
    cost = f"; cost {cost_text(status)}" if status.get("cost_dollars") is not None else ""
    if cost and status.get("cost_estimated"):
        cost += ", estimated from the workers' run time"
    console.print(
        f"job {job_id}: {status.get('state')}" + (f" ({status['error']})" if "error" in status else "") + cost
    )
    if status["heartbeats"]:
        console.print(status_table(status))


def watch_status(backend: Any, args: argparse.Namespace) -> int:
    """Show the status each time it changes, until the job ends; bounded like ``watch`` when nothing moves."""
    from lambdaml.backends.base import known_state, with_heartbeats
    from lambdaml.runtime import records

    store = backend.store()  # one client, and the spec read once, for every look
    known_state(store, args.job_id)
    job = records.stored_job(store, args.job_id)
    limit = job.sync.timeout_s + 60
    last_seen, last_change = None, time.monotonic()
    try:
        while True:
            status = with_heartbeats(store, args.job_id, job, records.status(store, args.job_id))
            seen = (
                status.get("state"),
                status.get("updated_at"),
                [(h["rank"], h["epoch"]) for h in status["heartbeats"]],
            )
            if seen != last_seen:
                last_seen, last_change = seen, time.monotonic()
                show_status(args.job_id, status, args.output, lines=True)
            state = status.get("state")
            if state in records.ENDED:
                return 0 if state == records.SUCCEEDED else EXIT_ENDED_BADLY
            if time.monotonic() - last_change > limit:
                raise ConfigError(f"job {args.job_id} made no progress for {limit:g}s (state: {state})")
            time.sleep(args.interval)
    except KeyboardInterrupt:
        errors.print(f"stopped watching; job {args.job_id} goes on in stack {args.stack}")
        return 130


#: ``status --watch``'s exit status for a job that ended other than succeeded.
EXIT_ENDED_BADLY = 1


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
        return TableRegistry(stack.client("dynamodb"), table, bucket=stack_store(stack)), f"stack {args.stack}"
    named = argparse.Namespace(**{**vars(args), "bucket": args.bucket or "lambdaml-data"})
    named.region = args.region or "us-east-1"
    storage = _storage(named)
    where = f"s3://{storage.bucket}/" + (f" at {storage.endpoint_url}" if storage.endpoint_url else "")
    return BucketRegistry(open_storage(storage)), where


def jobs_here(args: argparse.Namespace) -> int:
    """The jobs this machine ran (``LAMBDAML_HOME/jobs``), newest first; reads nothing but that folder."""
    from lambdaml.runtime.machine_jobs import MachineRegistry, shown

    registry = MachineRegistry()
    now = time.time()
    found = registry.newest_jobs(args.state)
    for problem in registry.refused:
        errors.print(f"warning: {problem}; left out")
    where = f"this machine ({shown(registry.root)})"
    if args.output == "json":
        print_json([job.summary(now) for job in found])
    elif found:
        progress.print(f"jobs run on {where}:")
        console.print(jobs_table([job.record.summary(now) for job in found], now=now))
    else:
        console.print("no jobs" + (f" {args.state}" if args.state else "") + f" run on {where}")
    return 0


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


def clean_channels(store: Any, ended: list[str], *, dry_run: bool) -> dict[str, int]:
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
        place = {"s3": spec.bucket, "dynamodb": spec.table}.get(spec.kind) or f"{spec.host}:{spec.port}"
        where = f"the {spec.kind} channel {place}"
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


def _still_ended(store: Any, job_id: str) -> Callable[[int], bool]:
    """Whether an attempt of the job has still ended, asked of its state record right before a delete."""
    from lambdaml.runtime import records

    return lambda attempt: records.attempt_ended(store, job_id, attempt)


def cmd_logs(args: argparse.Namespace) -> int:
    """A job's worker lines, by time, each with its rank (a stack's from CloudWatch Logs); --follow to its end."""
    if args.stack is None:
        return logs_here(args)
    from lambdaml.backends.stack import job_logs, job_of, resolve_stack, stack_store, status_of

    stack = resolve_stack(args.stack)
    store = stack_store(stack)
    status_of(store, args.job_id)  # an unknown job is one line
    limit = job_of(store, args.job_id).sync.timeout_s + 60  # as watch bounds a job that stopped moving
    seen: set[str] = set()

    def new_lines() -> list[Any]:
        fresh = [line for line in job_logs(stack, args.job_id) if line.event_id not in seen]
        seen.update(line.event_id for line in fresh)
        return fresh

    follow_lines(args, new_lines, lambda: status_of(store, args.job_id).get("state"), limit=limit)
    return 0


def follow_lines(
    args: argparse.Namespace,
    new_lines: Callable[[], list[Any]],
    state_now: Callable[[], str | None],
    *,
    limit: float,
    before_first: Callable[[], None] | None = None,
) -> int:
    """Print a job's lines (``at_ms``, ``rank``, ``message``) as ``logs`` does; with --follow, until it ends.

    Returns how many were printed. Gives up after ``limit`` seconds without a new line.
    """
    from lambdaml.runtime import records

    printed = 0
    last_change = time.monotonic()
    while True:
        state = state_now()  # before the lines: the last look has all up to the job's end
        new = new_lines()
        for line in new:
            if args.rank is not None and line.rank != args.rank:
                continue
            if printed == 0 and before_first is not None:
                before_first()
            printed += 1
            if args.output == "json":
                print_json_line({"at_ms": line.at_ms, "rank": line.rank, "message": line.message})
            else:
                when = time.strftime("%H:%M:%S", time.gmtime(line.at_ms / 1000)) + f".{line.at_ms % 1000:03d}"
                console.print(f"{when} rank {line.rank:>3}  {line.message}")
        if not args.follow or state in records.ENDED:
            return printed
        if new:
            last_change = time.monotonic()
        elif time.monotonic() - last_change > limit:
            raise ConfigError(f"job {args.job_id}: no new log lines for {limit:g}s (state: {state})")
        time.sleep(1.0)


def cmd_cancel(args: argparse.Namespace) -> int:
    if args.stack is None:
        return cancel_here(args)
    from lambdaml.backends.stack import StackBackend, resolve_stack

    status = StackBackend(resolve_stack(args.stack)).cancel(args.job_id)
    if args.output == "json":
        print_json(status)
    else:
        console.print(f"job {args.job_id}: {status.get('state')}")
    return 0


# --- the jobs this machine ran ------------------------------------------------------------------
#
# Without --stack, ``status``, ``logs``, ``cancel`` and ``attach`` look in this machine's job
# registry (``runtime.machine_jobs``) and nowhere else, but for what only a running job's store
# knows: its workers' heartbeats (``status``) and its cancel marker (``cancel``).

#: How long ``status`` waits for a running job's store to answer (its heartbeats are a detail).
_HEARTBEATS_WAIT_S = 2.0
#: How long a follower of a job on this machine waits for a sign of life past the job's sync
#: timeout (or, for a record without one, in all).
_QUIET_GRACE_S = 60.0


def here(job_id: str) -> MachineJob:
    """A job this machine ran, from its registry; one that is not there is one line naming where it looked."""
    from lambdaml.runtime.machine_jobs import MachineRegistry, shown

    registry = MachineRegistry()
    job = registry.job(job_id)
    if job is None:
        raise ConfigError(
            f"no job {job_id!r} among the jobs run on this machine ({shown(registry.root)}); "
            "for a stack's job add --stack NAME"
        )
    return job


def heartbeats_here(job: MachineJob) -> tuple[dict[str, Any] | None, str | None]:
    """A running job's heartbeats from its store (the state record, with them); or why there are none."""
    from lambdaml.backends.base import with_heartbeats
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime import records
    from lambdaml.storage import open_storage

    spec = job.storage_spec(connect_timeout_s=_HEARTBEATS_WAIT_S)
    if spec is None:
        return None, "its store is not recorded"
    try:
        store = open_storage(spec)
        state = records.status(store, job.job_id)
        return with_heartbeats(store, job.job_id, records.stored_job(store, job.job_id), state), None
    except LambdaMLError as exc:
        return None, _store_problem(job, exc)


def _store_problem(job: MachineJob, exc: Exception) -> str:
    from lambdaml.errors import ChannelUnavailable

    verb = "does not answer" if isinstance(exc, ChannelUnavailable) else "failed"
    return f"its store {job.where()} {verb} ({one_line(str(exc))})"


def status_here(args: argparse.Namespace) -> int:
    """A job this machine ran: its record, and while it runs, its workers' heartbeats if its store answers."""
    job = here(args.job_id)
    if args.watch:
        return watch_here(args, job)
    status = describe_here(job)
    if args.output == "json":
        print_json(status)
        return 0
    show_here(job, status)
    return 0


def describe_here(job: MachineJob) -> dict[str, Any]:
    """What ``status`` shows of a job run here: its record and, while it runs, its heartbeats (or why not)."""
    from lambdaml.runtime import records

    status: dict[str, Any] = job.summary(time.time())
    if job.record.state == records.RUNNING:
        beats, problem = heartbeats_here(job)
        status["heartbeats"] = None if beats is None else beats["heartbeats"]
        status["epochs"] = job.epochs if beats is None else beats["epochs"]
        if problem:
            status["heartbeats_unavailable"] = problem
    return status


def show_here(job: MachineJob, status: dict[str, Any]) -> None:
    from analytic_model.advisor import format_money, format_time
    from lambdaml.runtime.machine_jobs import shown

    record = job.record
    error = f" ({one_line(record.error)})" if record.error and record.state != "succeeded" else ""
    console.print(f"job {job.job_id} on this machine ({shown(job.folder)}): {record.state}{error}")
    ran = "running for" if record.ended_at is None else "took"
    what = [f"attempt {record.attempt}", f"{job.backend or '?'} backend"]
    if record.workers is not None:
        what.append(plural(record.workers, "worker"))
    if job.dataset:
        what.append(f"dataset {job.dataset}")
    what.append(f"started {format_time(max(0.0, time.time() - record.created_at))} ago")
    what.append(f"{ran} {format_time(status['duration_s'])}")
    console.print("  " + ", ".join(what))
    if record.cost_dollars is not None:
        estimated = " (estimated from the workers' run time)" if record.cost_estimated else ""
        console.print(f"  cost    {format_money(record.cost_dollars)}{estimated}")
    if job.result_path:
        console.print(f"  result  {job.result_path}")
    if record.model_uri:
        console.print(f"  model   {record.model_uri}")
    console.print(f"  store   {job.where()}")
    if status.get("heartbeats"):
        console.print(status_table(status))
    elif status.get("heartbeats_unavailable"):
        console.print(f"  no heartbeats: {status['heartbeats_unavailable']}")


def watch_here(args: argparse.Namespace, job: MachineJob) -> int:
    """``status --watch`` of a job run here: its status each time it changes, until it ends."""
    from lambdaml.runtime import records

    limit = (job.timeout_s or 0.0) + _QUIET_GRACE_S
    last_seen: Any = None
    last_change = time.monotonic()
    try:
        while True:
            status = describe_here(job)
            beats = status.get("heartbeats") or []
            seen = (status["state"], status["updated_at"], [(h["rank"], h["epoch"]) for h in beats])
            if seen != last_seen:
                last_seen, last_change = seen, time.monotonic()
                if args.output == "json":
                    print_json_line(status)
                else:
                    show_here(job, status)
            state = job.record.state
            if state in records.ENDED:
                return 0 if state == records.SUCCEEDED else EXIT_ENDED_BADLY
            if time.monotonic() - last_change > limit:
                raise ConfigError(f"job {args.job_id} made no progress for {limit:g}s (state: {state})")
            time.sleep(args.interval)
            job = here(args.job_id)
    except KeyboardInterrupt:
        errors.print(f"stopped watching; job {args.job_id} goes on on this machine")
        return 130


def logs_here(args: argparse.Namespace) -> int:
    """The lines the workers of a job run here kept (``LAMBDAML_HOME/jobs/ID/rank-R.jsonl``)."""
    from lambdaml.runtime.job_logs import LogReader
    from lambdaml.runtime.machine_jobs import shown

    job = here(args.job_id)
    reader = LogReader(job.folder)
    where = f"kept on this machine ({shown(job.folder)})"

    def header() -> None:
        progress.print(f"job {args.job_id}'s worker lines, {where}:")

    limit = (job.timeout_s or 0.0) + _QUIET_GRACE_S
    printed = follow_lines(args, reader.new_lines, lambda: here(args.job_id).record.state, limit=limit,
                           before_first=header)  # fmt: skip
    if printed == 0 and args.output != "json":
        rank = f" of rank {args.rank}" if args.rank is not None else ""
        console.print(f"no worker lines{rank} of job {args.job_id} {where}")
    return 0


def cancel_here(args: argparse.Namespace) -> int:
    """Cancel a job running here, through its store's cancel marker; an ended job is said to be so (exit 0)."""
    from dataclasses import replace

    from lambdaml.backends import BACKENDS
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime import machine_jobs, records
    from lambdaml.runtime.machine_jobs import MachineRegistry
    from lambdaml.storage import open_storage

    job = here(args.job_id)
    state = job.record.state
    # Its process gone (killed, say) without recording its end: it runs no more, but it never ended.
    orphan = job.stored_state == records.RUNNING and state != records.RUNNING
    if state != records.RUNNING and not orphan:
        if args.output == "json":
            print_json({**job.summary(time.time()), "cancelled": False})
        else:
            console.print(f"job {args.job_id} on this machine has ended ({state}); nothing to cancel")
        return EXIT_ALREADY_ENDED
    spec = job.storage_spec()
    try:
        if spec is None:
            raise ConfigError("its store is not recorded")
        status = BACKENDS.get(job.backend or "local")(spec).cancel(args.job_id)
        machine_jobs.copy_state(open_storage(spec), args.job_id)
    except LambdaMLError as exc:
        if not orphan:
            problem = _store_problem(job, exc) if spec is not None else str(exc)
            raise ConfigError(f"job {args.job_id} runs on this machine, but {problem}: {_stop_hint(job)}") from None
        # Nothing of it runs: this machine's record is the one left to say it was cancelled.
        now = time.time()
        MachineRegistry().save(replace(job.record, state=records.CANCELLED, updated_at=now, finished_at=now))
        status = {"state": records.CANCELLED}
    if args.output == "json":
        print_json({**here(args.job_id).summary(time.time()), "cancelled": status.get("state") == "cancelled"})
    elif status.get("state") == records.CANCELLED:
        after = f" (its process {job.pid} had gone)" if orphan else "; its workers stop at their next heartbeat"
        console.print(f"job {args.job_id} on this machine: cancelled{after}")
    else:
        console.print(f"job {args.job_id} on this machine: {status.get('state')}; nothing to cancel")
    return 0


#: ``cancel``'s exit status for a job that had already ended: nothing is left running, as asked.
EXIT_ALREADY_ENDED = 0


def _stop_hint(job: MachineJob) -> str:
    return f"stop it with Ctrl-C where it runs (process {job.pid})" if job.pid else "stop it where it runs"


def attach_here(args: argparse.Namespace) -> int:
    """Follow a job that another terminal of this machine runs, ending as its ``train`` will; or say why not."""
    from lambdaml.runtime import records
    from lambdaml.runtime.job_logs import LogReader

    job = here(args.job_id)
    state = job.record.state
    if state == records.SUCCEEDED:
        return _report(_kept_result(job), args.output)
    if state != records.RUNNING:
        error = f": {one_line(job.record.error)}" if job.record.error else ""
        raise ConfigError(f"job {args.job_id} on this machine has ended ({state}{error}); there is nothing to follow")
    if job.alive() is None and job.host is not None:
        raise ConfigError(f"job {args.job_id} runs on {job.host}, not on this machine; attach to it there")
    progress.print(
        f"attached to {args.job_id}: {job.backend or 'local'} backend, {job.record.workers or '?'} workers "
        f"on this machine (process {job.pid})"
    )
    reader = LogReader(job.folder)
    reader.new_lines()  # what it printed before: train prints only what comes next, too
    limit = (job.timeout_s or 0.0) + _QUIET_GRACE_S
    last_change = time.monotonic()
    try:
        while True:
            job = here(args.job_id)
            for line in reader.new_lines():
                last_change = time.monotonic()
                if line.rank == 0 and line.epoch is not None:  # the loss is global: rank 0's, as train prints
                    epoch = line.epoch
                    progress.print(
                        f"  epoch {int(epoch['epoch']):>3}/{job.epochs}  loss {epoch['loss']:.5f}  "
                        f"{epoch['elapsed_s']:7.2f}s"
                    )
            state = job.record.state
            if state == records.SUCCEEDED:
                return _report(_kept_result(job), args.output)
            if state in records.ENDED:
                error = f": {one_line(job.record.error)}" if job.record.error else ""
                raise ConfigError(f"job {args.job_id} {state}{error}")
            if time.monotonic() - last_change > limit:
                raise ConfigError(f"job {args.job_id}: nothing heard from it for {limit:g}s (state: {state})")
            time.sleep(0.5)
    except KeyboardInterrupt:
        errors.print(f"stopped following; job {args.job_id} goes on in its own terminal (process {job.pid})")
        return 130


def _report(result: JobResult, output: str) -> int:
    """A followed job's end, as ``train`` prints it (``cli.train.report``, which imports this module)."""
    if output == "json":
        print_json(result.to_json())
    else:
        print_result(result)
    return 0


def _kept_result(job: MachineJob) -> JobResult:
    """A succeeded job's result: the copy kept here, or else the one in its bucket (if that answers)."""
    from lambdaml import keys
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime.reports import JobResult
    from lambdaml.storage import get_json, open_storage

    kept = job.result()
    if kept is not None:
        return kept
    spec = job.storage_spec()
    key = keys.job_result(job.job_id)
    try:
        if spec is None:
            raise ConfigError("its store is not recorded")
        return JobResult.from_json(get_json(open_storage(spec), key), key)
    except LambdaMLError as exc:
        raise ConfigError(
            f"job {job.job_id} succeeded, but its result is neither kept here nor read from its store "
            f"({one_line(str(exc))}); see {job.result_path or key}"
        ) from None


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--parameter wants KEY=VALUE, got {item!r}")
    return key, value
