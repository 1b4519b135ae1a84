"""Linux's /proc, read by tests: a process's descendants and the TCP sockets they listen on."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

#: /proc/net/tcp* addresses that reach only this machine (127.0.0.1, ::1), as the kernel writes them.
LOOPBACK = {"0100007F", "00000000000000000000000001000000"}
_LISTEN = "0A"


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:  # the field after the state: its parent
            found.append(int(entry.name))
    return found


def descendants_of(pid: int) -> list[int]:
    children = children_of(pid)
    return children + [grandchild for child in children for grandchild in descendants_of(child)]


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return []


def state(pid: int) -> str | None:
    """Its state letter (R, S, T for stopped, Z for a zombie), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def wait_state(pid: int, wanted: str, within_s: float) -> str | None:
    """Wait, at most ``within_s``, for ``pid`` to show state ``wanted``; returns the last state seen.

    A signal is delivered asynchronously: right after ``kill`` the process may still show R."""
    deadline = time.monotonic() + within_s
    seen = state(pid)
    while seen != wanted and seen is not None and time.monotonic() < deadline:
        time.sleep(0.01)
        seen = state(pid)
    return seen


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie has ended: only its parent's wait is missing)."""
    return [pid for pid in pids if state(pid) not in (None, "Z")]


def wait_gone(pids: list[int], within_s: float) -> list[int]:
    """Wait, at most ``within_s``, for ``pids`` to end; returns those still running."""
    deadline = time.monotonic() + within_s
    left = alive(pids)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = alive(left)
    return left


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """Every TCP socket those processes listen on: (pid, address in /proc's hex, port)."""
    listeners: dict[str, tuple[str, int]] = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = row.split()
                if fields[3] == _LISTEN:
                    address, port = fields[1].split(":")
                    listeners[fields[9]] = (address, int(port, 16))  # by inode
    found = []
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    inode = target[len("socket:[") : -1] if target.startswith("socket:[") else ""
                    if inode in listeners:
                        found.append((pid, *listeners[inode]))
    return found
