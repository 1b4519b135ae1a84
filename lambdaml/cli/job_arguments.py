"""The arguments of the job commands: ``train`` and ``attach`` run or follow one, the others look at jobs."""

from __future__ import annotations

import argparse
from typing import Any

from lambdaml import catalogue
from lambdaml.cli.arguments import (
    JOB_STACK,
    JOB_STATES,
    OUTPUTS,
    age,
    follow_args,
    output_args,
    positive_seconds,
    storage_args,
)


def add_train_parsers(commands: argparse._SubParsersAction[Any]) -> None:
    """``train`` and ``attach``."""
    train = commands.add_parser("train", help="run a training job from a job file")
    train.add_argument("job", help="job file (.yaml or .json)")
    train.add_argument(
        "--backend",
        default=None,  # None: not given (local), so that train can refuse it next to --stack
        choices=list(catalogue.BACKENDS),
        help="where workers run: local (FaaS-like processes), iaas-local (torchrun); default: local",
    )
    train.add_argument("--workers", type=int, default=None, help="override the job file's worker count")
    train.add_argument(
        "--deadline",
        default=None,
        metavar="TIME",
        help="with workers: auto, the cheapest worker count whose predicted upper time meets it (e.g. 90s, 10m)",
    )
    train.add_argument(
        "--budget",
        default=None,
        metavar="DOLLARS",
        help="with workers: auto, the fastest worker count whose predicted upper cost fits it (e.g. 0.50)",
    )
    train.add_argument(
        "--mlflow",
        default=None,
        metavar="URI",
        help="log the finished job as an MLflow run at this tracking URI (overrides the job file's tracking.mlflow)",
    )
    train.add_argument("--job-id", default=None, help="job id (default: NAME-TIMESTAMP-RANDOM); used once")
    train.add_argument(
        "--resume", default=None, metavar="JOB_ID", help="continue an interrupted job from its checkpoints"
    )
    train.add_argument("--stack", default=None, help="run on Lambda in this deployed (or local) stack")
    follow_args(train)
    train.add_argument(
        "--detach", action="store_true", help="with --stack: start the job, print how to follow it, and exit"
    )
    output_args(train)

    attach = commands.add_parser("attach", help="follow a job to its end, as train does")
    attach.add_argument("job_id", help="the job's id, as train printed it")
    attach.add_argument("--stack", default=None, help=JOB_STACK)
    follow_args(attach)
    output_args(attach)


def add_job_parsers(commands: argparse._SubParsersAction[Any]) -> None:
    """``status``, ``cancel``, ``jobs``, ``clean`` and ``logs``."""
    for name, text in (("status", "show a job's state and its workers' heartbeats"), ("cancel", "cancel a job")):
        command = commands.add_parser(name, help=text)
        command.add_argument("job_id", help="the job's id, as train printed it")
        command.add_argument("--stack", default=None, help=JOB_STACK)
        output_args(command)
        if name == "status":
            command.add_argument(
                "--watch",
                action="store_true",
                help="print it again as it changes, until the job ends (exit 0 if it succeeded, else 1); "
                "with --output json, one JSON line each time",
            )
            command.add_argument(
                "--interval", type=positive_seconds, default=2.0, help="seconds between looks (default: %(default)s)"
            )

    jobs = commands.add_parser(
        "jobs", help="list the jobs run on this machine (or a stack's, or a data bucket's), newest first"
    )
    jobs.add_argument("--state", choices=JOB_STATES, default=None, help="only jobs in this state")
    # No default bucket or region: with none of these four, the jobs run on this machine, and no request.
    jobs.add_argument("--stack", default=None, help="list this stack's jobs instead")
    jobs.add_argument("--bucket", default=None, help="list this data bucket's jobs instead (default: lambdaml-data)")
    jobs.add_argument("--endpoint-url", default=None, help="the bucket's S3 endpoint, e.g. http://127.0.0.1:5000")
    jobs.add_argument("--region", default=None, help="the bucket's AWS region (default: us-east-1)")
    output_args(jobs)

    clean = commands.add_parser(
        "clean", help="delete ended jobs' checkpoints, heartbeats and channel keys, keeping results and models"
    )
    clean.add_argument(
        "--older-than",
        type=age,
        default=7 * 86_400.0,
        metavar="AGE",
        help="jobs ended this long ago: 7d, 12h, 30m, 0s (default: 7d)",
    )
    clean.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    clean.add_argument(
        "--results", action="store_true", help="also delete their results and models (the jobs stay listed)"
    )
    storage_args(clean)

    logs = commands.add_parser("logs", help="a job's worker log lines, by time, with their ranks")
    logs.add_argument("job_id", help="the job's id, as train printed it")
    logs.add_argument("--stack", default=None, help=JOB_STACK)
    logs.add_argument("--rank", type=int, default=None, help="only this rank's lines")
    logs.add_argument("--follow", action="store_true", help="print new lines as they come, until the job ends")
    logs.add_argument(
        "--output", choices=OUTPUTS, default="table", help="table (default), or json: one JSON object per line"
    )
    logs.add_argument("--json", dest="output", action="store_const", const="json", help="the same as --output json")
