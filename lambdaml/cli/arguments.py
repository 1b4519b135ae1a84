"""Option value types and the option groups several ``lambdaml`` commands share.

A value that does not parse is an ``argparse.ArgumentTypeError``, which the parser turns into
one line naming the option; a mistyped name from a closed set gets a "did you mean".
"""

from __future__ import annotations

import argparse
import difflib
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lambdaml.errors import ConfigError


def did_you_mean(word: str, known: Iterable[Any], *, quote: bool = True) -> str:
    """``; did you mean 'train'?``: the known name closest to a mistyped one, or "" if none is close."""
    close = difflib.get_close_matches(word, [str(name) for name in known], n=1)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if quote else f"; did you mean {close[0]}?"


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


def output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", choices=OUTPUTS, default="table", help="table (default), or json: one JSON document on stdout"
    )
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="the same as --output json")


#: Seconds in each unit an age may be given in.
_AGE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``0s`` or plain seconds, in seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _AGE_UNITS else (text, "s")
    try:
        seconds = float(number) * _AGE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age (e.g. 7d, 12h, 30m, 0s)") from None
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an age (e.g. 7d, 12h, 30m, 0s)")
    return seconds


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def png(text: str) -> str:
    # --plot's file is optional, so "--plot a.json b.json" would read a.json as the picture to write.
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a .png file name")
    # Checked before any work, and no directory is made for it: a mistyped one is said, not created.
    folder = Path(text).parent
    if not folder.is_dir():
        missing = "is not a directory" if folder.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r}: its directory {str(folder)!r} {missing}")
    return text


def plot_arg(parser: argparse.ArgumentParser, what: str, name: str) -> None:
    text = f"also draw {what} (default: {name})"
    parser.add_argument("--plot", nargs="?", type=png, const=name, default=None, metavar="FILE.png", help=text)


def columns(text: str) -> tuple[str, ...]:
    """``--features a,b,c``: column names, spaces around them dropped."""
    return tuple(name.strip() for name in text.split(","))


def storage_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bucket", default="lambdaml-data", help="data bucket (default: %(default)s)")
    parser.add_argument("--endpoint-url", default=None, help="S3 endpoint, e.g. moto's http://127.0.0.1:5000")
    parser.add_argument("--region", default="us-east-1", help="the bucket's AWS region (default: %(default)s)")
    parser.add_argument("--stack", default=None, help="use this stack's data bucket (and endpoint, if local)")


#: --stack of the commands that take a job id: without it, the job is one this machine ran.
JOB_STACK = "the stack the job runs in (default: a job run on this machine)"


def follow_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results-dir", default="results", help="where the result JSON goes (default: %(default)s)")
    parser.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="with --stack: Ctrl-C cancels the job (default: it runs on)",
    )


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str, what: str = "size") -> float:
    """``8e9``, ``800MB``, ``1.5GiB`` -> bytes; anything else, or a size not above zero, is a ConfigError."""
    raw = text.strip().lower().replace(" ", "")
    number = raw.rstrip("abgiktm")
    unit = raw[len(number) :]
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise ConfigError(f"{what}: {text!r} is not a size (e.g. 8e9, 800MB, 1.5GiB)") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be positive, got {text!r}")
    return value
