"""The ``lambdaml`` command's arguments: one subcommand per thing a user does.

A mistake on the command line is a ConfigError, printed as one line like every other user
error (argparse would print its usage and exit 2). ``-v`` and ``-q`` work at every level.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from analytic_model.channel_perf import MODELLED_ONLY
from analytic_model.tables import ARCHITECTURES
from lambdaml import catalogue
from lambdaml.errors import ConfigError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise (one line, exit 1) instead of printing the usage.

    An option is never taken for a longer one it begins (``--worker`` is not ``--workers``), and
    a mistyped subcommand, choice or option gets a "did you mean" naming the closest one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # subcommands' parsers are of this class too
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (see: {self.prog} --help)")

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        """As argparse's, but an unknown option is named by the subcommand it was given to."""
        namespace, extras = self.parse_known_args(*args, **kwargs)
        if extras:
            parser = self._chosen(namespace)
            options = [flag for action in parser._actions for flag in action.option_strings]
            unknown = (extra.partition("=")[0] for extra in extras if extra.startswith("-"))
            hint = next((h for h in (did_you_mean(word, options, quote=False) for word in unknown) if h), "")
            parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace

    def _chosen(self, namespace: argparse.Namespace) -> Parser:
        """The deepest subcommand's parser the command line chose (this one, without any)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                child = action.choices.get(getattr(namespace, action.dest, None) or "")
                if isinstance(child, Parser):
                    return child._chosen(namespace)
        return self

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            hint = did_you_mean(value, action.choices or ()) if isinstance(value, str) else ""
            if not hint:
                raise
            raise argparse.ArgumentError(action, f"{exc.message}{hint}") from None


def did_you_mean(word: str, known: Iterable[Any], *, quote: bool = True) -> str:
    """``; did you mean 'train'?``: the known name closest to a mistyped one, or "" if none is close."""
    close = difflib.get_close_matches(word, [str(name) for name in known], n=1)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if quote else f"; did you mean {close[0]}?"


def version() -> str:
    """The installed distribution's version; the package's own where it runs from an uninstalled tree."""
    from importlib import metadata

    try:
        return metadata.version("lambdaml")
    except metadata.PackageNotFoundError:
        import lambdaml

        return lambdaml.__version__


def subcommands(parser: argparse.ArgumentParser, depth: int = 0) -> Iterator[tuple[argparse.ArgumentParser, int]]:
    """The parser and every subcommand's parser under it, depth first, with its depth."""
    yield parser, depth
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from subcommands(child, depth + 1)


def _verbosity_args(parser: argparse.ArgumentParser, depth: int) -> None:
    # A subcommand parses into a namespace of its own that then overwrites its parent's values,
    # so each level counts into names of its own; ``verbosity`` adds them up.
    loud, quiet = f"verbose_{depth}", f"quiet_{depth}"
    parser.add_argument("-v", "--verbose", action="count", default=0, dest=loud, help="more logging (-vv: debug)")
    parser.add_argument("-q", "--quiet", action="count", default=0, dest=quiet, help="print only results and errors")


def verbosity(args: argparse.Namespace) -> int:
    """How many -v less how many -q, wherever on the command line they stood."""
    counts: dict[str, int] = {k: v for k, v in vars(args).items() if k.startswith(("verbose_", "quiet_"))}
    return sum(v if k.startswith("verbose_") else -v for k, v in counts.items())


def split_names(text: str) -> list[str]:
    """``a, b,c`` -> ``["a", "b", "c"]``: an option's comma-separated list."""
    return [name.strip() for name in text.split(",") if name.strip()]


def names_in(kind: str, known: Iterable[str]) -> Callable[[str], list[str]]:
    """The type of an option listing names from a closed set: checked as the command line is parsed."""
    allowed = tuple(known)

    def parse(text: str) -> list[str]:
        names = split_names(text)
        unknown = [name for name in names if name not in allowed]
        if unknown:
            hint = did_you_mean(unknown[0], allowed)
            raise argparse.ArgumentTypeError(f"unknown {kind} {unknown[0]!r}; known: {', '.join(allowed)}{hint}")
        if not names:
            raise argparse.ArgumentTypeError("names nothing")
        return names

    return parse


#: The states a job's record can be in (lambdaml.runtime.records).
JOB_STATES = ("running", "succeeded", "failed", "cancelled", "interrupted")

#: What ``--output`` prints: tables and lines for people, or one JSON document for programs.
OUTPUTS = ("table", "json")


def _output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", choices=OUTPUTS, default="table", help="table (default), or json: one JSON document on stdout"
    )
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="the same as --output json")


#: Seconds in each unit an age may be given in.
_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def _age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``0s`` or plain seconds, in seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _AGE_UNITS else (text, "s")
    try:
        seconds = float(number) * _AGE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age (e.g. 7d, 12h, 30m, 0s)") from None
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an age (e.g. 7d, 12h, 30m, 0s)")
    return seconds


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _png(text: str) -> str:
    # --plot's file is optional, so "--plot a.json b.json" would read a.json as the picture to write.
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a .png file name")
    # Checked before any work, and no directory is made for it: a mistyped one is said, not created.
    folder = Path(text).parent
    if not folder.is_dir():
        missing = "is not a directory" if folder.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r}: its directory {str(folder)!r} {missing}")
    return text


def _plot_arg(parser: argparse.ArgumentParser, what: str, name: str) -> None:
    text = f"also draw {what} (default: {name})"
    parser.add_argument("--plot", nargs="?", type=_png, const=name, default=None, metavar="FILE.png", help=text)


def _columns(text: str) -> tuple[str, ...]:
    """``--features a,b,c``: column names, spaces around them dropped."""
    return tuple(name.strip() for name in text.split(","))


def _storage_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bucket", default="lambdaml-data", help="data bucket (default: %(default)s)")
    parser.add_argument("--endpoint-url", default=None, help="S3 endpoint, e.g. moto's http://127.0.0.1:5000")
    parser.add_argument("--region", default="us-east-1", help="the bucket's AWS region (default: %(default)s)")
    parser.add_argument("--stack", default=None, help="use this stack's data bucket (and endpoint, if local)")


#: --stack of the commands that take a job id: without it, the job is one this machine ran.
_JOB_STACK = "the stack the job runs in (default: a job run on this machine)"


def _follow_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results-dir", default="results", help="where the result JSON goes (default: %(default)s)")
    parser.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="with --stack: Ctrl-C cancels the job (default: it runs on)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lambdaml", description="Distributed ML training on serverless functions.")
    parser.add_argument("--version", action="version", version=f"lambdaml {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    _follow_args(train)
    train.add_argument(
        "--detach", action="store_true", help="with --stack: start the job, print how to follow it, and exit"
    )
    _output_args(train)

    attach = commands.add_parser("attach", help="follow a job to its end, as train does")
    attach.add_argument("job_id", help="the job's id, as train printed it")
    attach.add_argument("--stack", default=None, help=_JOB_STACK)
    _follow_args(attach)
    _output_args(attach)

    local = commands.add_parser("local", help="the local stack (moto, the local Lambda service, caches)")
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    local_up = local_commands.add_parser("up", help="start the local stack and create the template's resources")
    local_up.add_argument("--name", default="local", help="stack name (default: %(default)s)")
    local_up.add_argument(
        "--cache",
        choices=["none", "redis", "memcached"],
        default="none",
        help="a cache for its channel (default: none)",
    )
    local_up.add_argument(
        "--account-concurrency",
        type=int,
        default=1000,
        help="the account's concurrent Lambda executions, enforced and reported (default: %(default)s, as AWS)",
    )
    local_up.add_argument(
        "--torch", action="store_true", help="add the torch worker, built from functions/worker_image/ (about 1 GB)"
    )
    local_up.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a template parameter, e.g. WorkerReservedConcurrency=4 (repeatable)",
    )
    local_up.add_argument("--port", type=int, default=None, help="the Lambda endpoint's port (default: a free one)")
    local_down = local_commands.add_parser("down", help="stop the local stack")
    local_down.add_argument("--name", default="local", help="stack name (default: %(default)s)")
    local_status = local_commands.add_parser("status", help="the local stack's endpoints, functions and logs")
    local_status.add_argument("--name", default="local", help="stack name (default: %(default)s)")
    _output_args(local_status)

    iaas = commands.add_parser("iaas", help="EC2 clusters for the IaaS baseline")
    iaas_commands = iaas.add_subparsers(dest="iaas_command", required=True, metavar="COMMAND")
    launch = iaas_commands.add_parser("launch", help="start a cluster that runs a job with torchrun (infra/ec2)")
    launch.add_argument("job", help="job file (.yaml or .json)")
    launch.add_argument("--name", required=True, help="cluster (stack) name")
    launch.add_argument("--workers", type=int, default=None, help="instances (default: the job's workers)")
    launch.add_argument("--instance-type", default=None, help="default: the job's iaas.instance_type")
    launch.add_argument("--job-id", default=None, help="job id (default: NAME-TIMESTAMP-RANDOM)")
    launch.add_argument("--image-id", default=None, help="default: the latest Amazon Linux 2023 AMI")
    launch.add_argument("--vpc-id", default=None, help="default: the default VPC")
    launch.add_argument("--subnet-id", default=None, help="default: the VPC's first subnet")
    launch.add_argument("--package", default=None, help="lambdaml wheel to install (default: built from source)")
    launch.add_argument("--endpoint-url", default=None, help="AWS endpoint (default: the job's storage endpoint)")
    terminate = iaas_commands.add_parser("terminate", help="delete a cluster and what its launch uploaded")
    terminate.add_argument("name", help="cluster (stack) name")

    compare = commands.add_parser("compare", help="compare result files side by side (tables, and a PNG with --plot)")
    compare.add_argument("results", nargs="+", metavar="RESULT", help="result JSON files (from train)")
    _plot_arg(compare, "loss against time and against dollars", "comparison.png")
    _output_args(compare)

    for name, text in (("status", "show a job's state and its workers' heartbeats"), ("cancel", "cancel a job")):
        command = commands.add_parser(name, help=text)
        command.add_argument("job_id", help="the job's id, as train printed it")
        command.add_argument("--stack", default=None, help=_JOB_STACK)
        _output_args(command)
        if name == "status":
            command.add_argument(
                "--watch",
                action="store_true",
                help="print it again as it changes, until the job ends (exit 0 if it succeeded, else 1); "
                "with --output json, one JSON line each time",
            )
            command.add_argument(
                "--interval", type=_positive_seconds, default=2.0, help="seconds between looks (default: %(default)s)"
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
    _output_args(jobs)

    clean = commands.add_parser(
        "clean", help="delete ended jobs' checkpoints, heartbeats and channel keys, keeping results and models"
    )
    clean.add_argument(
        "--older-than",
        type=_age,
        default=7 * 86_400.0,
        metavar="AGE",
        help="jobs ended this long ago: 7d, 12h, 30m, 0s (default: 7d)",
    )
    clean.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    clean.add_argument(
        "--results", action="store_true", help="also delete their results and models (the jobs stay listed)"
    )
    _storage_args(clean)

    logs = commands.add_parser("logs", help="a job's worker log lines, by time, with their ranks")
    logs.add_argument("job_id", help="the job's id, as train printed it")
    logs.add_argument("--stack", default=None, help=_JOB_STACK)
    logs.add_argument("--rank", type=int, default=None, help="only this rank's lines")
    logs.add_argument("--follow", action="store_true", help="print new lines as they come, until the job ends")
    logs.add_argument(
        "--output", choices=OUTPUTS, default="table", help="table (default), or json: one JSON object per line"
    )
    logs.add_argument("--json", dest="output", action="store_const", const="json", help="the same as --output json")

    from lambdaml.cli.model import add_parsers as model_parsers

    model_parsers(commands, _storage_args, _output_args, _columns)

    data_commands = commands.add_parser("data", help="datasets")
    data = data_commands.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    prepare = data.add_parser("prepare", help="split a dataset into binary shards in S3")
    prepare.add_argument("name", help="dataset name")
    source = prepare.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--input", nargs="+", metavar="FILE", help="dataset file or s3://BUCKET/KEY (several for CIFAR-10 batches)"
    )
    source.add_argument("--synthetic", choices=catalogue.SYNTHETIC_DATASETS, help="generate a synthetic dataset")
    source.add_argument("--builtin", choices=catalogue.BUILTIN_DATASETS, help="a small dataset shipped in a package")
    prepare.add_argument(
        "--format", choices=catalogue.DATASET_FORMATS, default=None, help="default: from the file suffix"
    )
    prepare.add_argument(
        "--test",
        metavar="FILE",
        default=None,
        help="a test file (or s3://...) in --input's format, read with the train set's features and labels",
    )
    prepare.add_argument("--label-column", choices=["first", "last"], default="first", help="CSV label column")
    prepare.add_argument("--label", metavar="COLUMN", default=None, help="Parquet label column (default: 'label')")
    prepare.add_argument(
        "--features",
        type=_columns,
        metavar="COL,COL...",
        default=None,
        help="Parquet feature columns (default: every other column of numbers)",
    )
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
    prepare.add_argument(
        "--test-fraction",
        type=float,
        default=None,
        help="share of a single --input's rows held out for testing (default: 0.2; none with --test)",
    )
    prepare.add_argument("--seed", type=int, default=0, help="seed of the shuffle and of synthetic data (default: 0)")
    prepare.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset (running jobs keep their version)"
    )
    _storage_args(prepare)
    listing = data.add_parser("list", help="the datasets in a bucket: versions, rows, shards, size")
    _storage_args(listing)
    _output_args(listing)
    rm = data.add_parser("rm", help="delete a dataset: every version and its pointer")
    rm.add_argument("name", help="dataset name")
    _storage_args(rm)

    _advisor_parsers(commands)

    demo = commands.add_parser("demo", help="train LR on synthetic Higgs-like data on an embedded local S3")
    demo.add_argument("--workers", type=int, default=4, help="workers, and shards (default: %(default)s)")
    demo.add_argument("--epochs", type=int, default=3, help="epochs (default: %(default)s)")
    demo.add_argument("--rows", type=int, default=40_000, help="rows of synthetic data (default: %(default)s)")
    for level, depth in subcommands(parser):
        _verbosity_args(level, depth)
    return parser


def _advisor_parsers(commands: Any) -> None:
    calibrate = commands.add_parser(
        "calibrate", help="measure channels, compute and start-up here (or on a stack) for the cost model"
    )
    calibrate.add_argument("--stack", default=None, help="measure this stack's channels (default: local services)")
    calibrate.add_argument(
        "--channels",
        type=names_in("channel", catalogue.SHARED_CHANNELS),
        default=",".join(catalogue.SHARED_CHANNELS),
        help="comma-separated kinds (default: %(default)s)",
    )
    calibrate.add_argument(
        "--model", default="lr", choices=list(catalogue.MODELS), help="model whose per-sample compute is timed"
    )
    calibrate.add_argument("--features", type=int, default=28, help="its width (default: 28, as Higgs)")
    calibrate.add_argument("--sparse", action="store_true", help="time it on sparse (CSR) rows")
    calibrate.add_argument("--batch-size", type=int, default=100, help="batch size per worker (default: 100)")
    calibrate.add_argument("--endpoint-url", default=None, help="a running S3/DynamoDB endpoint (default: start moto)")
    calibrate.add_argument("--redis", default=None, metavar="HOST:PORT", help="a running Redis (default: start one)")
    calibrate.add_argument("--memcached", default=None, metavar="HOST:PORT", help="a running Memcached")
    calibrate.add_argument("--quick", action="store_true", help="fewer repeats (seconds instead of a minute)")
    calibrate.add_argument("--out", default=None, help="profile file (default: ~/.lambdaml/profiles/TARGET.json)")
    _output_args(calibrate)

    advise = commands.add_parser("advise", help="predict time and cost on Lambda and EC2, and recommend one")
    advise.add_argument(
        "--model",
        default=None,
        help="lr, svm, softmax, multiclass_svm, kmeans, mlp, mobilenet, resnet18, resnet50 (required, or from --job)",
    )
    advise.add_argument(
        "--dataset-bytes",
        default=None,
        help="bytes of the binary shards workers hold, e.g. 1.3e9, 800MB (default: computed from "
        "--samples x --features as float32 rows, or from --nnz; not the size of a CSV or LIBSVM file)",
    )
    advise.add_argument("--samples", default=None, help="training rows (required, or from --job's manifest)")
    advise.add_argument("--features", default=None, help="features per row (sizes lr, svm, kmeans, mlp; and the data)")
    advise.add_argument("--params", default=None, help="parameter count (overrides the model's)")
    advise.add_argument("--flops-per-sample", default=None, help="training flops per sample (overrides)")
    advise.add_argument("--k", default=None, help="kmeans clusters (default: 8)")
    advise.add_argument(
        "--sparse", action="store_true", help="sparse rows: CSR shards (sized by --nnz or --density), sparse timing"
    )
    advise.add_argument(
        "--algorithm",
        default=None,
        choices=list(catalogue.ALGORITHMS),
        help="as the job file's algorithm.name (default: ga_sgd)",
    )
    advise.add_argument(
        "--compression",
        default=None,
        choices=list(catalogue.COMPRESSORS),
        help="as algorithm.compression.name (default: none; onebit_adam: onebit)",
    )
    advise.add_argument("--levels", default=None, help="qsgd: quantization levels (default: 16)")
    advise.add_argument("--ratio", default=None, help="topk: share of the entries sent (default: 0.01)")
    advise.add_argument(
        "--no-error-feedback", action="store_true", help="compress without error feedback (error_feedback: false)"
    )
    advise.add_argument("--warmup-steps", default=None, help="onebit_adam: uncompressed steps (default: 100)")
    advise.add_argument(
        "--protocol", default=None, choices=list(catalogue.PROTOCOLS), help="sync.protocol (default: bsp)"
    )
    advise.add_argument("--staleness", default=None, help="ssp: pushes a worker may run ahead (default: 4)")
    advise.add_argument("--optimizer", default=None, help="sgd (default), momentum, adam (checkpoint size)")
    advise.add_argument("--batch-size", default=None, help="batch size per worker (default: 100)")
    advise.add_argument("--local-epochs", default=None, help="ma_sgd/admm: epochs between averagings (default: 1)")
    length = advise.add_mutually_exclusive_group()
    length.add_argument("--epochs", default=None, help="epochs to the target loss (default 10)")
    length.add_argument("--rounds", default=None, help="collective rounds to the target loss, whatever W")
    length.add_argument("--from-result", default=None, metavar="RESULT.json", help="a short measured run's result")
    advise.add_argument("--target-loss", default=None, help="with --from-result: the loss to reach")
    advise.add_argument("--workers", default=None, help="worker counts to try (default: 1,2,5,10,20,50)")
    advise.add_argument(
        "--channels",
        type=names_in("channel", (*catalogue.SHARED_CHANNELS, *MODELLED_ONLY)),
        default=None,
        help="channels to try (default: all the profile knows; s3express, S3 Express One Zone, is modelled only "
        "and tried only when named)",
    )
    advise.add_argument(
        "--patterns",
        type=names_in("pattern", catalogue.PATTERNS),
        default=None,
        help=f"communication patterns to try (default: {','.join(catalogue.PATTERNS)})",
    )
    advise.add_argument("--memory", default=None, help="Lambda memory sizes (MB) to try (default: 1769,3008,10240)")
    advise.add_argument("--instances", default=None, help="EC2 instance types to try (default: all priced)")
    advise.add_argument("--region", default="us-east-1", help="whose prices (default: %(default)s)")
    advise.add_argument(
        "--arch",
        "--architecture",
        dest="arch",
        type=names_in("architecture", ARCHITECTURES),
        default="x86_64",
        help="Lambda instruction sets to try, e.g. x86_64,arm64: arm64 bills about 20%% less per GB-second "
        "(default: %(default)s)",
    )
    advise.add_argument("--cache-node", default=None, help="ElastiCache node type for redis/memcached")
    advise.add_argument("--profile", default=None, help="a profile file or name from 'lambdaml calibrate'")
    _plot_arg(advise, "cost against time", "advice.png")
    _output_args(advise)
    advise.add_argument("--all", action="store_true", help="print every configuration, not just the summary")
    # What a job file and its dataset say (lambdaml.cli.advice_job); a flag above overrides it.
    advise.add_argument(
        "--job",
        default=None,
        metavar="JOB.yaml",
        help="take the model, algorithm, workers, channel, pattern and memory from a job file, and the "
        "samples, features, classes and shard bytes from its dataset's manifest",
    )
    advise.add_argument("--classes", default=None, help="classes of the labels (softmax, multiclass_svm; default: 2)")
    sparsity = advise.add_mutually_exclusive_group()
    sparsity.add_argument("--nnz", default=None, help="with --sparse: non-zero features in all training rows")
    sparsity.add_argument("--density", default=None, help="with --sparse: the fraction of features that are non-zero")
