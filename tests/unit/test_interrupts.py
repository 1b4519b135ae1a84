"""Ctrl-C reaches a command once: its child processes are born deaf to it, and a second press
while the command stops is ignored. Real signals, sent to this process and to real children."""

from __future__ import annotations

import multiprocessing as mp
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from lambdaml.interrupts import held, ignore_sigint, interrupt_once, sigint_blocked

#: A child's view of Ctrl-C: whether SIGINT is blocked in it, and whether it is ignored.
CHILD = (
    "import signal; "
    "print(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []), "
    "signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
)


def ctrl_c() -> None:
    """SIGINT to this thread (the main one), as Ctrl-C sends it: thread-directed, so a block holds it here."""
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)


def _spawned(results: Any) -> None:
    blocked_at_start = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ignore_sigint()
    ctrl_c()  # ignored: no KeyboardInterrupt
    results.put((blocked_at_start, signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])))


def test_a_child_started_inside_sigint_blocked_is_born_blocked_and_the_parent_is_not() -> None:
    with sigint_blocked():
        inside = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    outside = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert inside.stdout.split() == ["True", "False"], inside.stderr
    assert outside.stdout.split() == ["False", "False"], outside.stderr
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_spawned_worker_is_blocked_from_its_start_then_ignores_ctrl_c() -> None:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with sigint_blocked():
        child = ctx.Process(target=_spawned, args=(results,))
        child.start()
    try:
        assert results.get(timeout=60) == (True, False)
    finally:
        child.join(timeout=30)
    assert child.exitcode == 0


def test_a_ctrl_c_while_blocked_is_raised_on_leaving() -> None:
    with pytest.raises(KeyboardInterrupt), sigint_blocked():
        ctrl_c()
        reached = True  # held back: the block's body goes on
    assert reached


def test_the_first_ctrl_c_raises_and_a_second_is_ignored_until_the_block_ends() -> None:
    stopped = []
    with interrupt_once():
        try:
            ctrl_c()
            raise AssertionError("Ctrl-C raised nothing")
        except KeyboardInterrupt:
            ctrl_c()  # impatient: must not cut the stopping short
            stopped.append(True)
    assert stopped and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        ctrl_c()


def test_a_process_about_to_exit_keeps_ignoring_ctrl_c() -> None:
    try:
        with interrupt_once(keep_ignoring=True):
            ctrl_c()
    except KeyboardInterrupt:
        pass
    try:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_without_a_ctrl_c_the_handler_is_restored_even_when_keep_ignoring() -> None:
    with interrupt_once(keep_ignoring=True):
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_caller_that_ignores_ctrl_c_or_handles_it_is_left_alone() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup
    try:
        with interrupt_once():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            ctrl_c()
    finally:
        signal.signal(signal.SIGINT, before)


def test_outside_the_main_thread_nothing_changes() -> None:
    seen: list[Any] = []

    def look() -> None:
        with interrupt_once():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(timeout=30)
    assert seen == [signal.default_int_handler]


def test_a_ctrl_c_while_output_is_held_waits_for_its_end() -> None:
    written = []
    with pytest.raises(KeyboardInterrupt), interrupt_once():
        with held():
            ctrl_c()
            written.append("the whole line")  # not cut in two
        written.append("after")
    assert written == ["the whole line"]


def test_held_changes_nothing_without_interrupt_once() -> None:
    with pytest.raises(KeyboardInterrupt), held():
        ctrl_c()
        raise AssertionError("Ctrl-C waited")


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130(capsys: pytest.CaptureFixture[str]) -> None:
    """The installed command starts in lambdaml.command, which takes Ctrl-C before loading the CLI's modules."""
    import signal as signals
    import tomllib
    from pathlib import Path

    from lambdaml.command import EXIT_INTERRUPTED, interrupted_while_starting

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["lambdaml"] == "lambdaml.command:main"
    with pytest.raises(SystemExit) as stopped:
        interrupted_while_starting(signals.SIGINT, None)
    assert stopped.value.code == EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "interrupted: lambdaml stopped while starting\n"
