"""Ctrl-C stops a command once, calmly: its child processes never see it, a second press is ignored,
and none cuts a line of output in two.

The terminal sends Ctrl-C's SIGINT to every process in its foreground group, so each process
a command starts (local workers, torchrun and its ranks, probes) would stop with a
KeyboardInterrupt traceback of its own. A child started inside ``sigint_blocked`` is born with
SIGINT blocked (a signal mask survives fork and exec), so none reaches it, not even during
its interpreter's start-up; its parent stops it when the command ends or is interrupted.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """Start child processes inside this: they are deaf to Ctrl-C from their first instruction.

    Only this thread's mask changes, so a Ctrl-C meanwhile still reaches the command (another
    thread takes it, or it waits here until the block ends).
    """
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def ignore_sigint() -> None:
    """A child's first call: ignore SIGINT for good, dropping one held back since it started."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


#: How deep the main thread is in ``held`` blocks, and whether a Ctrl-C came meanwhile.
_held = {"depth": 0, "pending": False}


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def held() -> Iterator[None]:
    """Inside (the main thread, under ``interrupt_once``): a Ctrl-C waits until the block ends.

    For writes a KeyboardInterrupt must not cut in two: rich writes a line, then forgets it, and
    an interrupt between the two has the line written again by the next print.
    """
    if not _main_thread():
        yield
        return
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if not _held["depth"] and _held["pending"]:
            _held["pending"] = False
            raise KeyboardInterrupt


@contextmanager
def interrupt_once(*, keep_ignoring: bool = False) -> Iterator[None]:
    """Inside: the first Ctrl-C raises KeyboardInterrupt and any later one is ignored.

    What the first starts (stopping workers, recording the job as interrupted, the line that
    says so) is then never cut short by an impatient second press; every wait in it is
    bounded. On leaving, Ctrl-C works as before, unless it came and ``keep_ignoring`` (a
    process about to exit). Outside the main thread, or where Ctrl-C is not Python's
    default (ignored, as under ``nohup``, or the caller's own handler), nothing changes.
    """
    previous = signal.getsignal(signal.SIGINT) if _main_thread() else None
    if previous is not signal.default_int_handler:
        yield
        return
    came: list[bool] = []

    def first(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        came.append(True)
        if _held["depth"]:
            _held["pending"] = True  # raised as the held block ends
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        _held["pending"] = False
        if not (came and keep_ignoring):
            signal.signal(signal.SIGINT, previous)
