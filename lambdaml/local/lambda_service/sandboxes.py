"""Execution environments ("sandboxes") and the pool of them each function has.

A ``Sandbox`` is one runtime process (``python -m awslambdaric``), its Runtime API port and
the attempt it is running; its condition guards all of that. A ``Pool`` reuses an idle
sandbox or makes a new one while the account's concurrency (concurrency.py) allows. Starting the process is
processes.py's job; this module only holds the state and how it settles an attempt when
the process has gone.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import threading
import time
import uuid

from lambdaml.local.lambda_service.concurrency import Concurrency
from lambdaml.local.lambda_service.models import LATEST, Attempt, FunctionConfig, Stopping
from lambdaml.local.lambda_service.responses import function_error


class Sandbox:
    """One execution environment: a runtime process, its Runtime API port and its current attempt."""

    def __init__(self, fn: FunctionConfig, sandbox_id: str) -> None:
        self.fn = fn
        self.id = sandbox_id
        self.cond = threading.Condition()
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.port = 0
        self.spawned_mono = 0.0
        self.ready_mono: float | None = None  # first poll of /invocation/next: init is done
        self.current: Attempt | None = None
        self.dead = False
        self.retired = False  # killed on purpose (timeout, OOM, stop): never reused
        self.oom = False
        self.init_error: bytes | None = None
        self.threads: list[threading.Thread] = []
        # Lambda's stream name: the day, the version and the environment's own id.
        self.log_stream = f"{time.strftime('%Y/%m/%d', time.gmtime())}/[{LATEST}]{uuid.uuid4().hex}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def kill(self) -> None:
        """SIGKILL the runtime and everything it started (it leads its own process group)."""
        self.retired = True
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            proc.kill()

    def retire(self) -> None:
        """Never reuse this sandbox: wake whoever waits on it (a long-polling runtime) and kill it."""
        with self.cond:
            self.retired = True
            self.cond.notify_all()
        self.kill()

    def settle_exited(self, attempt: Attempt) -> None:
        """Fail the attempt as AWS reports a runtime that exited (or was killed for memory); hold ``cond``."""
        code = self.process.returncode if self.process is not None else None
        if code is not None and code < 0:
            try:
                reason = f"signal: {signal.Signals(-code).name[3:].lower()}"
            except ValueError:
                reason = f"signal: {-code}"
            reason = reason.replace("signal: kill", "signal: killed")
        else:
            reason = f"exit status {code}"
        error_type = "Runtime.OutOfMemory" if self.oom else "Runtime.ExitError"
        payload = function_error(attempt.request_id, error_type, f"Runtime exited with error: {reason}")
        attempt.finish("oom" if self.oom else "crash", payload, error_type)


class Pool:
    """The sandboxes of one function: reuse an idle one, else start one, while the account's concurrency allows."""

    def __init__(self, fn: FunctionConfig, concurrency: Concurrency) -> None:
        self.fn = fn
        self.concurrency = concurrency
        self.cond = concurrency.cond  # shared by every pool: a freed execution may be another function's room
        self.live: list[Sandbox] = []
        self.idle: list[Sandbox] = []  # a stack: the most recently used sandbox is reused first
        self.busy: set[Sandbox] = set()
        self.closed = False
        self._ids = itertools.count(1)

    def acquire(self, wait_s: float) -> tuple[Sandbox, bool] | None:
        """(sandbox, cold) or None when no execution is free for ``wait_s``; a cold sandbox still needs a process."""
        deadline = time.monotonic() + wait_s
        with self.cond:
            while True:
                if self.closed:
                    raise Stopping
                if self.concurrency.take(self.fn.name):
                    return self._assign()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.cond.wait(remaining)

    def _assign(self) -> tuple[Sandbox, bool]:
        while self.idle:
            sandbox = self.idle.pop()
            if not sandbox.dead and not sandbox.retired:
                self.busy.add(sandbox)
                return sandbox, False
        sandbox = Sandbox(self.fn, f"{self.fn.name}-{next(self._ids)}")
        self.live.append(sandbox)
        self.busy.add(sandbox)
        return sandbox, True

    def release(self, sandbox: Sandbox) -> None:
        with self.cond:
            self._free(sandbox)
            if sandbox.dead or sandbox.retired or self.closed or sandbox not in self.live:
                self._drop(sandbox)
            else:
                self.idle.append(sandbox)
            self.cond.notify_all()

    def discard(self, sandbox: Sandbox) -> None:
        with self.cond:
            self._free(sandbox)
            self._drop(sandbox)
            self.cond.notify_all()

    def _free(self, sandbox: Sandbox) -> None:
        """Its execution ends (once, whoever of the executor and the reaper gets here first)."""
        if sandbox in self.busy:
            self.busy.discard(sandbox)
            self.concurrency.give(self.fn.name)

    def _drop(self, sandbox: Sandbox) -> None:
        with contextlib.suppress(ValueError):
            self.live.remove(sandbox)
        with contextlib.suppress(ValueError):
            self.idle.remove(sandbox)

    def close(self) -> list[Sandbox]:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            return list(self.live)

    def snapshot(self) -> list[Sandbox]:
        with self.cond:
            return list(self.live)
