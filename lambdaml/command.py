"""The ``lambdaml`` command's entry point: Ctrl-C is calm from the very start.

Loading the command's modules takes about a second; a Ctrl-C in that second would be a
KeyboardInterrupt traceback from deep inside an import. This module imports nothing heavy, sets
a handler that ends the process with one line, and only then loads ``lambdaml.cli``, whose
``main`` takes over Ctrl-C for the command itself.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

#: What an interrupted command exits with (128 + SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130


def interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before the command started: one line, exit 130 (SystemExit prints no traceback)."""
    sys.stderr.write("interrupted: lambdaml stopped while starting\n")
    raise SystemExit(EXIT_INTERRUPTED)


def main() -> int:
    signal.signal(signal.SIGINT, interrupted_while_starting)
    from lambdaml.cli import main as command

    # Python's own handler again: the command's KeyboardInterrupt handling (lambdaml.interrupts) takes over.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return command()


__all__ = ["EXIT_INTERRUPTED", "interrupted_while_starting", "main"]
