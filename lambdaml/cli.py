"""The ``lambdaml`` command: prepare data, train, run the demo.

User mistakes end with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from lambdaml.errors import ConfigError, LambdaMLError

log = logging.getLogger(__name__)
# Markup and emoji codes off: messages carry job-file keys, paths, bucket names and servers' errors
# ("[/x]" would crash rich's markup parser, "[blink]" vanish, ":x:" turn into an emoji). The few
# intended styles are Text objects; a Table's str cells follow the console's markup setting.
console = Console(highlight=False, markup=False, emoji=False)
errors = Console(stderr=True, highlight=False, markup=False, emoji=False)

EXIT_ERROR = 1
EXIT_USAGE = 2


def _storage_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bucket", default="lambdaml-data", help="data bucket (default: %(default)s)")
    parser.add_argument("--endpoint-url", default=None, help="S3 endpoint, e.g. moto's http://127.0.0.1:5000")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--stack", default=None, help="use this stack's data bucket (and endpoint, if local)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lambdaml", description="Distributed ML training on serverless functions.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="run a training job from a job file")
    train.add_argument("job", help="job file (.yaml or .json)")
    train.add_argument(
        "--backend", default="local", help="where workers run: local (FaaS-like processes), iaas-local (torchrun)"
    )
    train.add_argument("--workers", type=int, default=None, help="override the job file's worker count")
    train.add_argument("--job-id", default=None, help="job id (default: NAME-TIMESTAMP-RANDOM); used once")
    train.add_argument(
        "--resume", default=None, metavar="JOB_ID", help="continue an interrupted job from its checkpoints"
    )
    train.add_argument("--results-dir", default="results", help="where the result JSON goes (default: %(default)s)")
    train.add_argument("--stack", default=None, help="run on Lambda in this deployed (or local) stack")

    local = commands.add_parser("local", help="the local stack (moto, the local Lambda service, caches)")
    local_commands = local.add_subparsers(dest="local_command", required=True)
    local_up = local_commands.add_parser("up", help="start the local stack and create the template's resources")
    local_up.add_argument("--name", default="local", help="stack name (default: %(default)s)")
    local_up.add_argument("--cache", choices=["none", "redis", "memcached"], default="none")
    local_down = local_commands.add_parser("down", help="stop the local stack")
    local_down.add_argument("--name", default="local")

    iaas = commands.add_parser("iaas", help="EC2 clusters for the IaaS baseline")
    iaas_commands = iaas.add_subparsers(dest="iaas_command", required=True)
    launch = iaas_commands.add_parser("launch", help="start a cluster that runs a job with torchrun (infra/ec2)")
    launch.add_argument("job", help="job file (.yaml or .json)")
    launch.add_argument("--name", required=True, help="cluster (stack) name")
    launch.add_argument("--workers", type=int, default=None, help="instances (default: the job's workers)")
    launch.add_argument("--instance-type", default=None, help="default: the job's iaas.instance_type")
    launch.add_argument("--job-id", default=None)
    launch.add_argument("--image-id", default=None, help="default: the latest Amazon Linux 2023 AMI")
    launch.add_argument("--vpc-id", default=None, help="default: the default VPC")
    launch.add_argument("--subnet-id", default=None, help="default: the VPC's first subnet")
    launch.add_argument("--package", default=None, help="lambdaml wheel to install (default: built from source)")
    launch.add_argument("--endpoint-url", default=None, help="AWS endpoint (default: the job's storage endpoint)")
    terminate = iaas_commands.add_parser("terminate", help="delete a cluster and what its launch uploaded")
    terminate.add_argument("name")

    compare = commands.add_parser("compare", help="compare result files side by side (table and PNG)")
    compare.add_argument("results", nargs="+", metavar="RESULT", help="result JSON files (from train)")
    compare.add_argument("--plot", default="comparison.png", help="PNG to write (default: %(default)s)")

    for name, text in (("status", "show a job's state and its workers' heartbeats"), ("cancel", "cancel a job")):
        command = commands.add_parser(name, help=text)
        command.add_argument("job_id")
        command.add_argument("--stack", required=True, help="the stack the job runs in")

    data = commands.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True)
    prepare = data.add_parser("prepare", help="split a dataset into binary shards in S3")
    prepare.add_argument("name", help="dataset name")
    source = prepare.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", nargs="+", metavar="FILE", help="dataset file (several for CIFAR-10 batches)")
    source.add_argument("--synthetic", choices=["higgs", "rcv1"], help="generate a synthetic dataset")
    source.add_argument(
        "--builtin", choices=["digits", "breast_cancer", "mnist5k"], help="a small dataset shipped in a package"
    )
    prepare.add_argument(
        "--format", choices=["libsvm", "csv", "npz", "cifar10"], default=None, help="default: from the file suffix"
    )
    prepare.add_argument("--label-column", choices=["first", "last"], default="first", help="CSV label column")
    prepare.add_argument("--sparse", action="store_true", help="keep LIBSVM data sparse (CSR shards)")
    prepare.add_argument("--n-features", type=int, default=None, help="LIBSVM width / synthetic rcv1 columns")
    prepare.add_argument(
        "--memory-limit",
        metavar="SIZE",
        default=None,
        help="refuse an --input dataset needing more memory than this (8G, 500M, 1e9; default: half the RAM)",
    )
    prepare.add_argument("--rows", type=int, default=100_000, help="rows of a synthetic dataset")
    prepare.add_argument("--shards", type=int, required=True, help="number of shards (a multiple of the workers)")
    prepare.add_argument("--test-fraction", type=float, default=0.2)
    prepare.add_argument("--seed", type=int, default=0)
    prepare.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset (running jobs keep their version)"
    )
    _storage_args(prepare)

    _advisor_parsers(commands)

    demo = commands.add_parser("demo", help="train LR on synthetic Higgs-like data on an embedded local S3")
    demo.add_argument("--workers", type=int, default=4)
    demo.add_argument("--epochs", type=int, default=5)
    demo.add_argument("--rows", type=int, default=40_000)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        handlers = {"train": cmd_train, "data": cmd_data, "demo": cmd_demo, "status": cmd_status, "cancel": cmd_cancel}
        handlers.update(local=cmd_local, iaas=cmd_iaas, compare=cmd_compare)
        handlers.update(calibrate=cmd_calibrate, advise=cmd_advise)
        handler = handlers[args.command]
        return handler(args)
    except LambdaMLError as exc:
        errors.print(f"error: {one_line(str(exc))}", soft_wrap=True)
        return EXIT_ERROR
    except MemoryError as exc:  # e.g. --rows far beyond this machine; numpy says how much it wanted
        errors.print(f"error: not enough memory{': ' + one_line(str(exc)) if str(exc) else ''}", soft_wrap=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130


def one_line(message: str) -> str:
    """A message as the one line a user error gets: some (botocore's, for one) span several."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


# --- train ------------------------------------------------------------------------


def cmd_train(args: argparse.Namespace) -> int:
    from lambdaml.config import load_job, parse_job, read_job_file

    if args.resume and args.job_id and args.resume != args.job_id:
        raise ConfigError("--resume names the job to continue; it takes no other --job-id")
    job_id, resume = (args.resume, True) if args.resume else (args.job_id, False)
    if args.stack:
        job_file = read_job_file(args.job)
        if args.workers is not None and isinstance(job_file, dict):
            job_file["workers"] = args.workers
        result = train_on_stack(job_file, args.stack, job_id=job_id, resume=resume, results_dir=args.results_dir)
    else:
        job = load_job(args.job)
        if args.workers is not None:
            job = parse_job({**job.model_dump(mode="json"), "workers": args.workers}, f"{args.job} with --workers")
        from lambdaml.runtime.job import new_job_id

        job_id = job_id or new_job_id(job.name)
        try:
            result = train_with_progress(
                job, backend=args.backend, job_id=job_id, resume=resume, results_dir=args.results_dir
            )
        except KeyboardInterrupt:
            errors.print(
                f"interrupted: job {job_id} stopped; continue it with: lambdaml train {args.job} --resume {job_id}"
            )
            return 130
    print_result(result)
    return 0


def train_on_stack(
    job_file: Any, stack_name: str, *, job_id: str | None, resume: bool = False, results_dir: str | None
) -> dict[str, Any]:
    """Start the job through the stack's coordinator and follow the workers' heartbeats."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from lambdaml.runtime import remote
    from lambdaml.runtime.job import save_result

    stack = remote.resolve_stack(stack_name)
    job = remote.bind(job_file, stack)
    job_id, attempt = remote.start(job, stack, job_id=job_id, resume=resume)
    how = f"resumed (attempt {attempt})" if resume else "started"
    console.print(f"job {job_id} {how} on stack {stack_name}: {job.workers} Lambda workers over {job.channel.kind}")
    # A TextColumn renders markup whatever the console says; the detail is the server's status.
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.fields[detail]}", markup=False),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("epochs", total=job.algorithm.epochs, detail="starting")

        def on_progress(status: dict[str, Any], heartbeats: list[dict[str, Any]]) -> None:
            done = min((h["epoch"] for h in heartbeats), default=0) if len(heartbeats) == job.workers else 0
            lead = next((h for h in heartbeats if h["rank"] == 0), None)
            detail = f"loss {lead['loss']:.5f}" if lead else status.get("state", "")
            progress.update(task, completed=done, detail=detail)

        result = remote.watch(job, job_id, attempt, stack, on_progress=on_progress)
    return save_result(result, results_dir)


def cmd_local(args: argparse.Namespace) -> int:
    from lambdaml.local import stack

    if args.local_command == "up":
        record = stack.up(args.name, cache=args.cache)
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
    from lambdaml import keys
    from lambdaml.runtime import remote

    stack = remote.resolve_stack(args.stack)
    store = remote.stack_store(stack)
    status = remote.status_of(store, args.job_id)
    job = remote.job_of(store, args.job_id)
    console.print(f"job {args.job_id}: {status.get('state')}" + (f" ({status['error']})" if "error" in status else ""))
    attempt = int(status.get("attempt", 1))
    beats = store.get_many([keys.worker_heartbeat(args.job_id, attempt, r) for r in range(job.workers)])
    for key in sorted(beats):
        beat = json.loads(beats[key])
        console.print(
            f"  rank {beat['rank']}: epoch {beat['epoch']}/{job.algorithm.epochs}, loss {beat['loss']:.5f}, "
            f"invocation {beat['invocation']}"
        )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from lambdaml.runtime import remote

    status = remote.cancel(args.job_id, remote.resolve_stack(args.stack))
    console.print(f"job {args.job_id}: {status.get('state')}")
    return 0


def train_with_progress(job: Any, **kwargs: Any) -> dict[str, Any]:
    from lambdaml.backends import JobEvent
    from lambdaml.runtime.job import run_job

    epochs = job.algorithm.epochs
    resumed = "resuming" if kwargs.get("resume") else "job"
    console.print(
        Text.assemble(
            f"{resumed} {kwargs['job_id']}: training " if kwargs.get("job_id") else "training ",
            (job.model.name, "bold"),
            f" with {job.algorithm.name} on {job.workers} workers "
            f"over {job.channel.kind} ({job.sync.protocol}, {job.sync.pattern})",
        )
    )

    def on_event(event: JobEvent) -> None:
        if event.rank == 0:  # the loss is global; one line per epoch
            console.print(f"  epoch {event.epoch:>3}/{epochs}  loss {event.loss:.5f}  {event.elapsed_s:7.2f}s")

    return run_job(job, on_event=on_event, **kwargs)


def _accuracy_of(result: dict[str, Any]) -> str:
    """What an accuracy is of: the class count, and what always answering the most common class scores."""
    classes, majority = result.get("classes"), result.get("majority_accuracy")
    if not classes:
        return ""
    return f" over {classes} classes" + (f" (most common class alone: {majority:.4f})" if majority is not None else "")


def print_result(result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="time per worker (s)", title_justify="left")
    for column in ("rank", "load", "compute", "communicate", "wait", "total", "requests", "MB sent", "KB sent/round"):
        table.add_column(column, justify="right")
    for w in result["workers"]:
        table.add_row(
            str(w["rank"]),
            *(f"{w[k]:.2f}" for k in ("load_s", "compute_s", "communicate_s", "wait_s", "total_s")),
            str(int(w["channel"]["requests"])),
            f"{w['channel']['bytes_sent'] / 1e6:.2f}",
            f"{w['channel'].get('bytes_sent_per_round', 0.0) / 1e3:.1f}",
        )
    console.print(table)
    if result.get("test_accuracy") is not None:
        console.print(
            f"test accuracy {result['test_accuracy']:.4f}{_accuracy_of(result)}  test loss {result['test_loss']:.5f}"
        )
    console.print(f"job {result['job_id']} finished in {result['wall_time_s']:.1f}s; model at {result['model_uri']}")
    cost = result.get("cost")
    if cost and "ec2" in cost:
        ec2 = cost["ec2"]
        console.print(
            f"cost ${cost['total_dollars']:.6f}: {ec2['instances']} x {ec2['instance_type']} for "
            f"{ec2['seconds_billed']} s at ${ec2['dollars_per_hour']}/h; prices as of {cost['prices_checked']}"
        )
    elif cost:
        lam, channel = cost["lambda"], cost["channel"]
        console.print(
            f"cost ${cost['total_dollars']:.6f}: Lambda {lam['invocations']} invocations "
            f"({lam['cold_starts']} cold), {lam['gb_seconds']:.2f} GB-s "
            f"(${lam['dollars']:.6f}); {channel['kind']} {int(channel['requests'])} requests "
            f"(${channel['dollars']:.6f}); prices as of {cost['prices_checked']}"
        )
    if "result_path" in result:
        console.print(f"result: {result['result_path']}")


# --- iaas and compare --------------------------------------------------------------


def cmd_iaas(args: argparse.Namespace) -> int:
    from lambdaml.runtime import cluster

    if args.iaas_command == "terminate":
        gone = cluster.terminate(args.name)
        console.print(f"cluster {gone.name} terminated ({gone.workers} x {gone.instance_type}, job {gone.job_id})")
        return 0
    from lambdaml.config import check_endpoint_url, load_job, parse_job

    check_endpoint_url(args.endpoint_url, "--endpoint-url")
    job = load_job(args.job)
    overrides: dict[str, Any] = {}
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
    from lambdaml.compare import comparison_table, load_results, plot_comparison

    results = load_results(args.results)
    # Never squeeze a run's name or figures; run labels come from result files: no markup.
    wide = Console(highlight=False, markup=False, emoji=False, width=max(console.width, 150))
    wide.print(comparison_table(results))
    plot_comparison(results, args.plot)
    console.print(f"plot: {args.plot}")
    return 0


# --- calibrate and advise ---------------------------------------------------------------


def _advisor_parsers(commands: Any) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="measure channels, compute and start-up here (or on a stack) for the cost model"
    )
    calibrate.add_argument("--stack", default=None, help="measure this stack's channels (default: local services)")
    calibrate.add_argument("--channels", default="s3,redis,memcached,dynamodb", help="comma-separated kinds")
    calibrate.add_argument("--model", default="lr", help="model whose per-sample compute is timed (default: lr)")
    calibrate.add_argument("--features", type=int, default=28, help="its width (default: 28, as Higgs)")
    calibrate.add_argument("--sparse", action="store_true", help="time it on sparse (CSR) rows")
    calibrate.add_argument("--batch-size", type=int, default=100, help="batch size per worker (default: 100)")
    calibrate.add_argument("--endpoint-url", default=None, help="a running S3/DynamoDB endpoint (default: start moto)")
    calibrate.add_argument("--redis", default=None, metavar="HOST:PORT", help="a running Redis (default: start one)")
    calibrate.add_argument("--memcached", default=None, metavar="HOST:PORT", help="a running Memcached")
    calibrate.add_argument("--quick", action="store_true", help="fewer repeats (seconds instead of a minute)")
    calibrate.add_argument("--out", default=None, help="profile file (default: ~/.lambdaml/profiles/TARGET.json)")

    advise = commands.add_parser("advise", help="predict time and cost on Lambda and EC2, and recommend one")
    advise.add_argument("--model", required=True, help="lr, svm, kmeans, mlp, mobilenet, resnet18, resnet50")
    advise.add_argument("--dataset-bytes", required=True, help="dataset size, e.g. 8e9, 800MB, 1.5GiB")
    advise.add_argument("--samples", required=True, help="training rows")
    advise.add_argument("--features", default="0", help="features per row (sizes lr, svm, kmeans, mlp)")
    advise.add_argument("--params", default=None, help="parameter count (overrides the model's)")
    advise.add_argument("--flops-per-sample", default=None, help="training flops per sample (overrides)")
    advise.add_argument("--k", default="8", help="kmeans clusters")
    advise.add_argument("--sparse", action="store_true", help="sparse rows (uses a profile's sparse timing)")
    advise.add_argument("--algorithm", default="ga_sgd", help="ga_sgd, ma_sgd, admm, kmeans")
    advise.add_argument("--optimizer", default="sgd", help="sgd, momentum, adam (checkpoint size)")
    advise.add_argument("--batch-size", default="100", help="batch size per worker")
    advise.add_argument("--local-epochs", default="1", help="ma_sgd/admm: epochs between averagings")
    length = advise.add_mutually_exclusive_group()
    length.add_argument("--epochs", default=None, help="epochs to the target loss (default 10)")
    length.add_argument("--rounds", default=None, help="collective rounds to the target loss, whatever W")
    length.add_argument("--from-result", default=None, metavar="RESULT.json", help="a short measured run's result")
    advise.add_argument("--target-loss", default=None, help="with --from-result: the loss to reach")
    advise.add_argument("--workers", default="1,2,5,10,20,50", help="worker counts to try")
    advise.add_argument("--channels", default=None, help="channels to try (default: all the profile knows)")
    advise.add_argument("--patterns", default="allreduce,scatter_reduce")
    advise.add_argument("--memory", default="1769,3008,10240", help="Lambda memory sizes (MB) to try")
    advise.add_argument("--instances", default=None, help="EC2 instance types to try (default: all priced)")
    advise.add_argument("--region", default="us-east-1")
    advise.add_argument("--cache-node", default=None, help="ElastiCache node type for redis/memcached")
    advise.add_argument("--profile", default=None, help="a profile file or name from 'lambdaml calibrate'")
    advise.add_argument("--plot", default=None, metavar="FILE.png", help="write the cost-against-time picture")
    advise.add_argument("--json", action="store_true", help="print the whole advice as JSON")
    advise.add_argument("--all", action="store_true", help="print every configuration, not just the summary")


def _names(text: str, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"--{what} names nothing")
    return names


def _number(text: str | None, what: str, *, integer: bool = False) -> float:
    """A positive number from an option (``11e6`` counts as whole); one line naming the option otherwise."""
    kind = "a whole number" if integer else "a number"
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"--{what} must be {kind}, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--{what} must be positive, got {text!r}")
    if integer and value != int(value):
        raise ConfigError(f"--{what} must be {kind}, got {text!r}")
    return int(value) if integer else value


def profile_path(name: str) -> Path:
    """A profile given by path, or by the name ``lambdaml calibrate`` saved it under."""
    from lambdaml import settings

    path = Path(name)
    if path.is_file() or path.suffix == ".json" or "/" in name:
        return path
    return settings.home() / "profiles" / f"{name}.json"


def cmd_calibrate(args: argparse.Namespace) -> int:
    from analytic_model.profile import save_profile
    from lambdaml import calibrate as cal
    from lambdaml.config import check_endpoint_url
    from lambdaml.models import MODELS

    check_endpoint_url(args.endpoint_url, "--endpoint-url")
    kinds = _names(args.channels, "channels")
    unknown = [k for k in kinds if k not in cal.KINDS]
    if unknown:
        raise ConfigError(f"unknown channel {unknown[0]!r}; known: {', '.join(cal.KINDS)}")
    MODELS.get(args.model)  # an unknown model fails here, with the known ones
    if args.features < 1 or args.batch_size < 2:
        raise ConfigError("--features must be at least 1 and --batch-size at least 2")
    probe = cal.ComputeProbe(
        args.model, args.features, args.sparse, args.batch_size, rows=max(4000, 4 * args.batch_size)
    )
    effort = cal.Effort.quick() if args.quick else cal.Effort()

    def step(what: str) -> None:
        console.print(f"  measuring {what} ...")

    target = f"stack:{args.stack}" if args.stack else "local"
    if args.stack:
        specs, storage, local, stack = cal.stack_target(args.stack, kinds)
        step("the stack's function start-up")
        first, warm, invoke = cal.measure_stack_startup(stack, effort.repeats)
        # On AWS the functions' CPUs are not this machine's: keep the shipped compute defaults there.
        probes = [probe] if local else []
        measured = cal.calibrate(
            specs, probes, storage=storage, effort=effort, target=target,
            shared_cores=cal.cores() if local else None, startup=(first, invoke), on_step=step,
        )  # fmt: skip
        measured["faas"]["warm_start_s"] = warm
        if not local:
            measured["_source"] += " (channels timed from this machine, not from inside Lambda)"
    else:
        with cal.local_channels(kinds, endpoint_url=args.endpoint_url, redis=args.redis, memcached=args.memcached) as (
            specs,
            storage,
        ):
            measured = cal.calibrate(
                specs, [probe], storage=storage, effort=effort, target=target, shared_cores=cal.cores(), on_step=step
            )
    out = Path(args.out) if args.out else profile_path(args.stack or "local")
    path = save_profile(measured, out)
    _print_profile(measured)
    console.print(f"profile: {path}", soft_wrap=True)
    console.print(f"use it with: lambdaml advise ... --profile {path}", soft_wrap=True)
    return 0


def _print_profile(measured: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"channels ({measured['target']})", title_justify="left")
    for column in ("channel", "put ms", "get ms", "put MB/s", "get MB/s", "store ms/request"):
        table.add_column(column, justify="right")
    for kind, c in sorted(measured["channels"].items()):
        table.add_row(
            kind,
            f"{c['latency_put_s'] * 1e3:.2f}",
            f"{c['latency_get_s'] * 1e3:.2f}",
            f"{c['bandwidth_put_Bps'] / 1e6:.0f}",
            f"{c['bandwidth_get_Bps'] / 1e6:.0f}",
            f"{c['server_get_s'] * 1e3:.3f}",
        )
    console.print(table)
    for key, m in measured.get("compute", {}).get("measured", {}).items():
        console.print(
            f"compute {key}: {m['per_sample_s'] * 1e6:.3f} us per sample, {m['per_step_s'] * 1e6:.0f} us per step",
            soft_wrap=True,
        )
    faas = measured.get("faas", {})
    cores = faas.get("shared_cores")
    console.print(
        f"worker start-up {faas['cold_start_s']['numpy']:.2f} s (+{faas['invoke_s']:.2f} s per further worker)"
        + (f"; workers share {cores:g} cores" if cores else ""),
        soft_wrap=True,
    )


def _workload_from(args: argparse.Namespace) -> Any:
    import json as json_

    from analytic_model import Workload
    from analytic_model.advisor import epochs_to_target, parse_bytes

    epochs = 10.0
    if args.from_result:
        if args.target_loss is None:
            raise ConfigError("--from-result needs --target-loss")
        try:
            result = json_.loads(Path(args.from_result).read_text())
        except FileNotFoundError:
            raise ConfigError(f"result file {args.from_result!r} not found") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read result file {args.from_result!r}: {exc}") from None
        try:
            target = float(args.target_loss)
        except ValueError:
            raise ConfigError(f"--target-loss must be a number, got {args.target_loss!r}") from None
        epochs = epochs_to_target(result, target)
    elif args.target_loss is not None:
        raise ConfigError("--target-loss goes with --from-result")
    elif args.epochs is not None:
        epochs = _number(args.epochs, "epochs")
    features = 0 if args.features == "0" else int(_number(args.features, "features", integer=True))
    return Workload(
        model=args.model,
        dataset_bytes=parse_bytes(args.dataset_bytes, "--dataset-bytes"),
        samples=int(_number(args.samples, "samples", integer=True)),
        features=features,
        params=int(_number(args.params, "params", integer=True)) if args.params is not None else None,
        flops_per_sample=_number(args.flops_per_sample, "flops-per-sample") if args.flops_per_sample else None,
        k=int(_number(args.k, "k", integer=True)),
        algorithm=args.algorithm,
        batch_size=int(_number(args.batch_size, "batch-size", integer=True)),
        epochs=epochs,
        rounds=_number(args.rounds, "rounds") if args.rounds is not None else None,
        local_epochs=int(_number(args.local_epochs, "local-epochs", integer=True)),
        optimizer=args.optimizer,
        sparse=args.sparse,
    )


def cmd_advise(args: argparse.Namespace) -> int:
    from analytic_model import advise, load_profile

    workload = _workload_from(args)
    profile = load_profile(profile_path(args.profile)) if args.profile else None
    advice = advise(
        workload,
        profile,
        workers=[int(_number(w, "workers", integer=True)) for w in _names(args.workers, "workers")],
        channels=_names(args.channels, "channels") if args.channels else None,
        patterns=_names(args.patterns, "patterns"),
        memory_mb=[int(_number(m, "memory", integer=True)) for m in _names(args.memory, "memory")],
        instances=_names(args.instances, "instances") if args.instances else None,
        region=args.region,
        cache_node=args.cache_node,
    )
    plot = advice.plot(args.plot) if args.plot else None
    if args.json:
        sys.stdout.write(advice.to_json() + "\n")
        return 0
    _print_advice(advice, every=args.all)
    if plot is not None:
        console.print(f"plot: {plot}")
    return 0


def _print_advice(advice: Any, *, every: bool) -> None:
    from rich.table import Table

    from analytic_model.advisor import format_money, format_time

    w = advice.workload
    console.print(
        Text.assemble(
            (w.model, "bold"),
            f" with {w.algorithm}: {w.samples:,} samples, {w.dataset_bytes / 1e9:.3g} GB, "
            f"{w.rounds or w.epochs:g} {'rounds' if w.rounds else 'epochs'}; region {advice.region}, "
            f"profile {advice.target}",
        ),
        soft_wrap=True,
    )
    front = {id(p) for p in advice.pareto}
    rows = [(p, id(p) in front) for p in sorted(advice.rows, key=lambda p: (p.time_s, p.cost))]
    title = "every configuration" if every else "the Pareto front (*) and the fastest of each channel and instance type"
    table = Table(title=title, title_justify="left", box=None, padding=(0, 1))
    for column in ("", "configuration", "time", "cost", "start+load", "compute", "comm"):
        left = column in ("", "configuration")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    short = {"allreduce": "AR", "scatter_reduce": "SR"}
    for p, best in rows if every else advice.summary_rows():
        t = p.time
        if p.platform == "faas":
            how = f" {p.option} {short.get(p.pattern or '', p.pattern)}" if p.workers > 1 else ""
            where = f"FaaS {p.workers:>3}{how} {p.memory_mb}MB"
        else:
            where = f"IaaS {p.workers:>3} {p.option}"
        table.add_row(
            "*" if best else "",
            where,
            format_time(p.time_s),
            format_money(p.cost),
            format_time(t["startup_s"] + t["load_s"]),
            format_time(t["compute_s"]),
            format_time(t["communicate_s"] + t.get("checkpoint_s", 0.0) + t.get("continuation_s", 0.0)),
        )
    console.print(table)
    if advice.skipped:
        console.print(f"{len(advice.skipped)} configurations skipped (e.g. {advice.skipped[0]})")
    console.print(advice.recommendation, soft_wrap=True)


# --- data -------------------------------------------------------------------------


def _memory_limit(text: str | None) -> int | None:
    """``--memory-limit``: parse_bytes' ``8GB``, ``1.5GiB``, ``1e9``, and the short ``8G``, ``500M`` (decimal)."""
    if text is None:
        return None
    from analytic_model.advisor import parse_bytes

    short = text.strip()[-1:].lower() in ("k", "m", "g", "t")
    try:
        return int(parse_bytes(text + "B" if short else text, "--memory-limit"))
    except ConfigError:
        raise ConfigError(f"--memory-limit: {text!r} is not a positive size (e.g. 8G, 500M, 1.5GiB, 1e9)") from None


def cmd_data(args: argparse.Namespace) -> int:
    """Load or generate a dataset, cut it into shards and upload them with a manifest."""
    import numpy as np
    from pydantic import ValidationError

    from lambdaml.config import StorageSpec, check_endpoint_url
    from lambdaml.data import formats, shards, synthetic
    from lambdaml.data.builtin import load_builtin
    from lambdaml.data.sparse import Features
    from lambdaml.storage import open_storage

    # cmd_demo and older callers build the namespace by hand, without the newer options
    builtin = getattr(args, "builtin", None)
    sparse = bool(getattr(args, "sparse", False))
    n_features = getattr(args, "n_features", None)
    memory_limit = _memory_limit(getattr(args, "memory_limit", None))
    inputs = [args.input] if isinstance(args.input, str) else list(args.input or [])
    from lambdaml import keys

    # Every argument is checked before a long load and before S3 is contacted.
    keys.check_name(args.name, "dataset name")
    if args.shards < 1:
        raise ConfigError("--shards must be at least 1")
    if not 0 <= args.test_fraction < 1:  # NaN fails this too
        raise ConfigError(f"--test-fraction must be in [0, 1), not {args.test_fraction}")
    bucket, endpoint_url, region = args.bucket, check_endpoint_url(args.endpoint_url, "--endpoint-url"), args.region
    if getattr(args, "stack", None):
        from lambdaml.runtime import remote

        stack = remote.resolve_stack(args.stack)
        bucket, endpoint_url, region = stack.output("DataBucketName"), stack.endpoints.get("s3"), stack.region
    try:  # checked before a long load, so a typo fails at once
        storage = StorageSpec(bucket=bucket, endpoint_url=endpoint_url, region=region)
    except ValidationError as exc:
        raise ConfigError(
            "; ".join(
                (f"--{str(e['loc'][0]).replace('_', '-')}: " if e["loc"] else "")
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
        ) from None
    if n_features is not None and not 1 <= n_features <= np.iinfo(np.int32).max:
        raise ConfigError(f"--n-features must be between 1 and {np.iinfo(np.int32).max} (CSR column indices are int32)")
    if args.format and not inputs:
        raise ConfigError("--format applies to --input files")
    if memory_limit is not None and not inputs:
        raise ConfigError("--memory-limit applies to --input files")
    fmt = args.synthetic or builtin or args.format or {".csv": "csv", ".npz": "npz"}.get(Path(inputs[0]).suffix.lower())
    fmt = fmt or "libsvm"
    if sparse and fmt not in ("libsvm", "rcv1"):
        raise ConfigError(f"--sparse applies to LIBSVM input, not {fmt}")
    if n_features is not None and fmt not in ("libsvm", "rcv1"):
        raise ConfigError(f"--n-features applies to LIBSVM input and --synthetic rcv1, not {fmt}")
    X: Features
    sample_shape: list[int] | None = None
    if args.synthetic:
        if args.rows < 2:
            raise ConfigError("--rows must be at least 2")
        if args.synthetic == "rcv1":
            X, y, _ = synthetic.rcv1_like(args.rows, features=n_features or synthetic.RCV1_FEATURES, seed=args.seed)
        else:
            X, y, _ = synthetic.higgs_like(args.rows, seed=args.seed)
    elif builtin:
        X, y, sample_shape = load_builtin(builtin)
    else:
        if len(inputs) > 1 and fmt != "cifar10":
            raise ConfigError(f"--input takes one {fmt} file; only --format cifar10 reads several")
        if fmt == "cifar10":
            X, y, sample_shape = formats.load_cifar10_batches(inputs, memory_limit=memory_limit)
        elif fmt == "npz":
            X, y, sample_shape = formats.load_npz(inputs[0], memory_limit=memory_limit)
        elif fmt == "csv":
            X, y = formats.load_csv(inputs[0], args.label_column, memory_limit=memory_limit)
        else:
            X, y = formats.load_libsvm(inputs[0], n_features, sparse=sparse, memory_limit=memory_limit)
    shards.check_split(len(y), args.shards, args.test_fraction)
    store = open_storage(storage)
    store.ensure()
    overwrite = bool(getattr(args, "overwrite", False))
    manifest = shards.prepare(  # refuses an existing name unless --overwrite, before any upload
        store,
        args.name,
        X,
        y,
        shards=args.shards,
        test_fraction=args.test_fraction,
        seed=args.seed,
        sample_shape=sample_shape,
        overwrite=overwrite,
    )
    console.print(
        f"dataset {manifest.name} ({manifest.format}): {manifest.train_rows} training rows in {manifest.shards} "
        f"shards, {manifest.test_rows} test rows, {manifest.n_features} features, {manifest.n_classes} classes "
        f"-> s3://{storage.bucket}/datasets/{args.name}/ (version {manifest.dataset_version})"
    )
    return 0


# --- demo -------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    """Everything local: moto as S3, synthetic data, 4 workers over S3, then the result."""
    import yaml

    from lambdaml.config import parse_job
    from lambdaml.local.services import running, start_moto

    console.print("starting an embedded local S3 (moto) ...")
    with running(start_moto()) as (moto,):
        data = yaml.safe_load(resources.files("lambdaml.examples").joinpath("higgs-lr.yaml").read_text())
        data["workers"] = args.workers
        data["algorithm"]["epochs"] = args.epochs
        data["storage"]["endpoint_url"] = data["channel"]["endpoint_url"] = moto.url
        job = parse_job(data, "demo job")
        cmd_data(
            argparse.Namespace(
                name=job.dataset, synthetic="higgs", input=None, format=None, label_column="first",
                rows=args.rows, shards=args.workers, test_fraction=0.2, seed=0,
                bucket=job.storage.bucket, endpoint_url=moto.url, region=job.storage.region,
            )
        )  # fmt: skip
        result = train_with_progress(job, results_dir="results")
        print_result(result)
        losses = [point["loss"] for point in result["loss_curve"]]
        falling = all(b <= a + 1e-9 for a, b in itertools.pairwise(losses))
        console.print(
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f} ({'falling' if falling else 'not monotone'}), "
            f"test accuracy {result['test_accuracy']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
