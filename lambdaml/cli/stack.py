"""Jobs in a stack (``lambdaml jobs``, ``status``, ``cancel``) and the local stack (``lambdaml local up/down``)."""

from __future__ import annotations

import argparse
import time

from lambdaml.cli.output import console, jobs_table, print_json, status_table
from lambdaml.errors import ConfigError


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
        )
        console.print(f"local stack {args.name!r} is up:")
        for service, url in sorted(record["endpoints"].items()):
            console.print(f"  {service:<15} {url}")
        for key, value in sorted(record["outputs"].items()):
            console.print(f"  {key:<15} {value}")
        console.print(f"train on it with: lambdaml train JOB.yaml --stack {args.name}")
    else:
        stopped = stack.down(args.name)
        console.print(f"local stack {args.name!r} is down ({len(stopped)} processes stopped)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from lambdaml.backends.stack import StackBackend, resolve_stack

    backend = StackBackend(resolve_stack(args.stack))
    status = backend.status(args.job_id)
    if args.output == "json":
        print_json(status)
        return 0
    console.print(f"job {args.job_id}: {status.get('state')}" + (f" ({status['error']})" if "error" in status else ""))
    if status["heartbeats"]:
        console.print(status_table(status))
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    """The jobs recorded in a data bucket (a stack's, or the storage options'), newest first."""
    from lambdaml.cli.data import _storage
    from lambdaml.runtime import records
    from lambdaml.storage import open_storage

    now = time.time()
    summaries = records.job_summaries(open_storage(_storage(args)), now=now)
    if args.state:
        summaries = [s for s in summaries if s["state"] == args.state]
    if args.output == "json":
        print_json(summaries)
    elif summaries:
        console.print(jobs_table(summaries, now=now))
    else:
        console.print("no jobs" + (f" {args.state}" if args.state else ""))
    return 0


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
