"""Jobs in a stack (``lambdaml jobs``, ``status``, ``cancel``) and the local stack (``lambdaml local ...``)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from lambdaml.cli.output import console, errors, jobs_table, one_line, print_json, print_json_line, status_table
from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.runtime.registry import JobRegistry


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
        console.print(f"local stack {args.name!r} is down ({len(stopped)} processes stopped)")
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
    console.print(f"job {job_id}: {status.get('state')}" + (f" ({status['error']})" if "error" in status else ""))
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
    """The jobs a stack's registry holds (or a data bucket's, by the storage options), newest first."""
    from lambdaml.runtime import records

    now = time.time()
    summaries = records.job_summaries(job_registry(args), now=now, state=args.state)
    if args.output == "json":
        print_json(summaries)
    elif summaries:
        console.print(jobs_table(summaries, now=now))
    else:
        console.print("no jobs" + (f" {args.state}" if args.state else ""))
    return 0


def job_registry(args: argparse.Namespace) -> JobRegistry:
    """A stack's JobsTable, or the records in the data bucket the storage options name."""
    from lambdaml.cli.data import _storage
    from lambdaml.runtime.registry import BucketRegistry, TableRegistry
    from lambdaml.storage import open_storage

    if args.stack:
        from lambdaml.backends.stack import resolve_stack, stack_store

        stack = resolve_stack(args.stack)
        return TableRegistry(stack.client("dynamodb"), stack.output("JobsTableName"), bucket=stack_store(stack))
    return BucketRegistry(open_storage(_storage(args)))


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove what ended jobs left in their bucket and on their channels; records, results and models stay."""
    from lambdaml.cli.data import _storage
    from lambdaml.runtime import records
    from lambdaml.storage import open_storage

    store = open_storage(_storage(args))
    ended = records.ended_jobs(store, older_than_s=args.older_than)
    objects = records.clean_jobs(store, ended, dry_run=args.dry_run, results=args.results)
    channel_keys = clean_channels(store, ended, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for job_id in sorted(set(objects) | set(channel_keys)):
        on_channel = f" and {channel_keys[job_id]} channel keys" if job_id in channel_keys else ""
        console.print(f"job {job_id}: {verb} {objects.get(job_id, 0)} objects{on_channel}")
    console.print(
        f"{verb} {sum(objects.values())} objects and {sum(channel_keys.values())} channel keys of {len(ended)} "
        f"ended jobs; results and models {'too' if args.results else 'kept'}"
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
            count = channel_residue(job, job_id, dry_run=dry_run)
        except LambdaMLError as exc:
            unreachable.add(where)
            errors.print(f"warning: {where} is out of reach ({one_line(str(exc))}); its keys stay")
            continue
        if count:
            found[job_id] = count
    return found


def cmd_logs(args: argparse.Namespace) -> int:
    """A stack's job's worker lines from CloudWatch Logs, by time, each with its rank; --follow to the job's end."""
    from lambdaml.backends.stack import job_logs, job_of, resolve_stack, stack_store, status_of
    from lambdaml.runtime import records

    stack = resolve_stack(args.stack)
    store = stack_store(stack)
    status_of(store, args.job_id)  # an unknown job is one line
    limit = job_of(store, args.job_id).sync.timeout_s + 60  # as watch bounds a job that stopped moving
    seen: set[str] = set()
    last_change = time.monotonic()
    while True:
        state = status_of(store, args.job_id).get("state")  # before the lines: the last poll has all up to its end
        new = [line for line in job_logs(stack, args.job_id) if line.event_id not in seen]
        for line in new:
            seen.add(line.event_id)
            if args.rank is not None and line.rank != args.rank:
                continue
            if args.output == "json":
                print_json_line({"at_ms": line.at_ms, "rank": line.rank, "message": line.message})
            else:
                when = time.strftime("%H:%M:%S", time.gmtime(line.at_ms / 1000)) + f".{line.at_ms % 1000:03d}"
                console.print(f"{when} rank {line.rank:>3}  {line.message}")
        if not args.follow or state in records.ENDED:
            return 0
        if new:
            last_change = time.monotonic()
        elif time.monotonic() - last_change > limit:
            raise ConfigError(f"job {args.job_id}: no new log lines for {limit:g}s (state: {state})")
        time.sleep(1.0)


def cmd_cancel(args: argparse.Namespace) -> int:
    from lambdaml.backends.stack import StackBackend, resolve_stack

    status = StackBackend(resolve_stack(args.stack)).cancel(args.job_id)
    if args.output == "json":
        print_json(status)
    else:
        console.print(f"job {args.job_id}: {status.get('state')}")
    return 0


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--parameter wants KEY=VALUE, got {item!r}")
    return key, value
