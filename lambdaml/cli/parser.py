"""The ``lambdaml`` command's arguments: one subcommand per thing a user does.

A mistake on the command line is a ConfigError, printed as one line like every other user
error (argparse would print its usage and exit 2). ``-v`` and ``-q`` work at every level.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any, NoReturn

from lambdaml import catalogue
from lambdaml.cli.advice_arguments import add_advisor_parsers
from lambdaml.cli.arguments import columns, did_you_mean, output_args, plot_arg, split_names, storage_args
from lambdaml.cli.data_arguments import add_data_parsers
from lambdaml.cli.job_arguments import add_job_parsers, add_train_parsers
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lambdaml", description="Distributed ML training on serverless functions.")
    parser.add_argument("--version", action="version", version=f"lambdaml {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_train_parsers(commands)

    local = commands.add_parser("local", help="the local stack (moto, the local Lambda service, caches)")
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    local_up = local_commands.add_parser("up", help="start the local stack and create the template's resources")
    local_up.add_argument("--name", default="local", help="stack name (default: %(default)s)")
    local_up.add_argument(
        "--cache",
        choices=["none", *(kind for kind, c in catalogue.CHANNELS.items() if c.stack_cache and c.local_server)],
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
    output_args(local_status)

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
    plot_arg(compare, "loss against time and against dollars", "comparison.png")
    output_args(compare)

    add_job_parsers(commands)

    from lambdaml.cli.model import add_parsers as model_parsers

    model_parsers(commands, storage_args, output_args, columns)
    add_data_parsers(commands)
    add_advisor_parsers(commands)

    demo = commands.add_parser("demo", help="train LR on synthetic Higgs-like data on an embedded local S3")
    demo.add_argument("--workers", type=int, default=4, help="workers, and shards (default: %(default)s)")
    demo.add_argument("--epochs", type=int, default=3, help="epochs (default: %(default)s)")
    demo.add_argument("--rows", type=int, default=40_000, help="rows of synthetic data (default: %(default)s)")
    for level, depth in subcommands(parser):
        _verbosity_args(level, depth)
    return parser


# split_names lives in cli.arguments; cli.advice takes it from here.
__all__ = ["Parser", "build_parser", "did_you_mean", "split_names", "subcommands", "verbosity", "version"]
