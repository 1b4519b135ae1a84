"""The IaaS baseline: ``lambdaml iaas launch/terminate`` (EC2 clusters) and ``lambdaml compare``."""

from __future__ import annotations

import argparse
from pathlib import Path

from lambdaml.cli.output import console, print_json


def cmd_iaas(args: argparse.Namespace) -> int:
    from lambdaml.runtime import cluster

    if args.iaas_command == "terminate":
        gone = cluster.terminate(args.name)
        console.print(f"cluster {gone.name} terminated ({gone.workers} x {gone.instance_type}, job {gone.job_id})")
        return 0
    from lambdaml.config import check_endpoint_url, load_job, parse_job

    check_endpoint_url(args.endpoint_url, "--endpoint-url")
    job = load_job(args.job)
    overrides: dict[str, int | dict[str, str]] = {}  # what the flags change of the job file
    if args.workers is not None:
        overrides["workers"] = args.workers
    if args.instance_type is not None:
        overrides["iaas"] = {"instance_type": args.instance_type}
    if overrides:
        job = parse_job({**job.model_dump(mode="json"), **overrides}, f"{args.job} with overrides")
    launched, outputs = cluster.launch(
        job,
        name=args.name,
        job_id=args.job_id,
        image_id=args.image_id,
        vpc_id=args.vpc_id,
        subnet_id=args.subnet_id,
        package=Path(args.package) if args.package else None,
        endpoint_url=args.endpoint_url or job.storage.endpoint_url,
    )
    console.print(
        f"cluster {launched.name}: {launched.workers} x {launched.instance_type}, head {outputs.get('HeadInstanceId')} "
        f"({outputs.get('HeadPrivateIp')}); job {launched.job_id} writes "
        f"s3://{launched.bucket}/jobs/{launched.job_id}/result.json when done. "
        f"Stop paying with: lambdaml iaas terminate {launched.name}"
    )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from lambdaml.cli.compare import comparison_json, comparison_tables, load_results, plot_comparison

    results = load_results(args.results)
    plot = plot_comparison(results, args.plot) if args.plot else None
    if args.output == "json":
        print_json({"runs": comparison_json(results), "plot": str(plot) if plot else None})
        return 0
    for table in comparison_tables(results):
        console.print(table)
    if plot is not None:
        console.print(f"plot: {plot}")
    return 0
