"""The local stack: ``lambdaml local up``, ``down`` and ``status``."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlparse

from lambdaml.cli.output import console, plural, print_json
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
    from lambdaml.platforms.aws_lambda.find import local_record, local_stack_names, refusing_endpoint

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
        "reflector": record.get("outputs", {}).get("ReflectorEndpoint"),  # the direct channel's rendezvous service
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
    if status["reflector"]:
        console.print(f"  {'reflector':<15} {status['reflector']} (direct channel's rendezvous service)")
    for f in functions:
        console.print(f"{f['logical']}: {f['function']}")
        console.print(f"  log file   {f['log_file']}")
        console.print(f"  log group  {f['log_group'] or '-'}")
    console.print(f"invocations: {status['invocations']}")
    return 0


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--parameter wants KEY=VALUE, got {item!r}")
    return key, value
