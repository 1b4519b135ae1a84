"""The ``lambdaml`` command: prepare data, train, run the demo.

User mistakes end with one line on stderr and a non-zero exit, never a traceback. This module
parses the arguments and hands them to the command's module (train, stack, data, iaas, advice,
demo, ...), each a thin layer over the library; what they print is in ``output``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from lambdaml.cli.advice import cmd_advise, cmd_calibrate, profile_path
from lambdaml.cli.data import cmd_data
from lambdaml.cli.demo import cmd_demo
from lambdaml.cli.iaas import cmd_compare, cmd_iaas
from lambdaml.cli.local_stack import cmd_local
from lambdaml.cli.model import cmd_evaluate, cmd_export, cmd_predict
from lambdaml.cli.output import configure, console, errors, one_line, print_result
from lambdaml.cli.parser import build_parser, verbosity
from lambdaml.cli.stack import cmd_cancel, cmd_clean, cmd_jobs, cmd_logs, cmd_status
from lambdaml.cli.train import cmd_attach, cmd_train, train
from lambdaml.errors import LambdaMLError
from lambdaml.interrupts import interrupt_once

EXIT_ERROR = 1
#: The exit status of a command stopped by Ctrl-C, as a shell reports a process SIGINT ended (128 + 2).
EXIT_INTERRUPTED = 130
#: Logging levels from -q (and below) up to -vv (and above).
LEVELS = (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; ``argv`` None: this process is the ``lambdaml`` command, and ends after it."""
    # The first Ctrl-C stops the command; one more while it stops would cut short the stopping
    # (workers, the job's record, the line saying so), so it is ignored, until the process exits.
    with interrupt_once(keep_ignoring=argv is None):
        args: argparse.Namespace | None = None
        try:
            args = build_parser().parse_args(argv)
            return _run(args)
        except SystemExit as exc:  # --help and --version have printed what was asked
            return exc.code if isinstance(exc.code, int) else 0
        except LambdaMLError as exc:
            errors.print(f"error: {one_line(str(exc))}")
            return EXIT_ERROR
        except MemoryError as exc:  # e.g. --rows far beyond this machine; numpy says how much it wanted
            errors.print(f"error: not enough memory{': ' + one_line(str(exc)) if str(exc) else ''}")
            return EXIT_ERROR
        except KeyboardInterrupt:
            errors.print(f"interrupted: {_stopped(args)}")
            return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    loudness = verbosity(args)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(LEVELS[max(0, min(loudness + 1, len(LEVELS) - 1))])  # each run its own
    configure(quiet=loudness < 0, json=getattr(args, "output", "table") == "json")
    handlers = {
        "train": cmd_train,
        "attach": cmd_attach,
        "data": cmd_data,
        "demo": cmd_demo,
        "status": cmd_status,
        "cancel": cmd_cancel,
        "jobs": cmd_jobs,
        "logs": cmd_logs,
        "clean": cmd_clean,
        "local": cmd_local,
        "iaas": cmd_iaas,
        "compare": cmd_compare,
        "calibrate": cmd_calibrate,
        "advise": cmd_advise,
        "predict": cmd_predict,
        "evaluate": cmd_evaluate,
        "export": cmd_export,
    }
    return handlers[args.command](args)


def _stopped(args: argparse.Namespace | None) -> str:
    """What stopped, for the one line an interrupted command ends with (a job's command says more)."""
    if args is None:
        return "lambdaml stopped"
    sub = getattr(args, f"{args.command}_command", None)
    return f"lambdaml {args.command}{' ' + sub if sub else ''} stopped"


__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "build_parser",
    "cmd_advise",
    "cmd_attach",
    "cmd_calibrate",
    "cmd_cancel",
    "cmd_clean",
    "cmd_compare",
    "cmd_data",
    "cmd_demo",
    "cmd_iaas",
    "cmd_jobs",
    "cmd_local",
    "cmd_logs",
    "cmd_status",
    "cmd_train",
    "configure",
    "console",
    "errors",
    "main",
    "one_line",
    "print_result",
    "profile_path",
    "train",
]
