"""Executing one attempt: a sandbox from the function's pool, the hand-over, the bounded wait, the record.

Sync invocations and async deliveries both come here. The timeout is enforced by the
waiting caller: past the deadline (or the init timeout, before the runtime took the event)
the sandbox is killed and the attempt fails with ``Sandbox.Timedout``.
"""

from __future__ import annotations

import logging
import time

from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.memory import MemoryWatcher
from lambdaml.local.lambda_service.models import Attempt, Stopping
from lambdaml.local.lambda_service.processes import Spawner
from lambdaml.local.lambda_service.records import InvocationLog
from lambdaml.local.lambda_service.responses import error_type_of, function_error
from lambdaml.local.lambda_service.sandboxes import Sandbox

log = logging.getLogger(__name__)


class Executor:
    """Runs attempts on the sandboxes of ``functions``, starting processes with ``spawner`` as needed."""

    def __init__(
        self,
        functions: Functions,
        spawner: Spawner,
        memory: MemoryWatcher,
        records: InvocationLog,
        init_timeout_s: float,
    ) -> None:
        self._functions = functions
        self._spawner = spawner
        self._memory = memory
        self._records = records
        self._init_timeout_s = init_timeout_s

    def execute(self, attempt: Attempt, wait_s: float) -> bool:
        """Run one attempt to its outcome on a sandbox; False when no capacity freed up within ``wait_s``."""
        pool = self._functions.pool(attempt.fn.name)
        while True:
            got = pool.acquire(wait_s)
            if got is None:
                return False
            sandbox, cold = got
            if cold:
                try:
                    self._spawner.spawn(sandbox)
                except (OSError, Stopping) as exc:
                    pool.discard(sandbox)
                    if isinstance(exc, Stopping):
                        raise
                    log.error("cannot start a runtime for %s: %s", attempt.fn.name, exc)
                    attempt.cold, attempt.assigned_wall = True, time.time()
                    error = function_error(attempt.request_id, "Runtime.StartError", f"cannot start: {exc}")
                    attempt.finish("crash", error, "Runtime.StartError")
                    self._records.record(attempt, None)
                    return True
            if self._run_on(sandbox, attempt, cold):
                break
            pool.discard(sandbox)  # a warm sandbox that died while idle: try another
        if attempt.status in ("success", "error") and not sandbox.dead:
            pool.release(sandbox)
        else:
            sandbox.kill()
            pool.discard(sandbox)
        self._records.record(attempt, sandbox)
        return True

    def _run_on(self, sandbox: Sandbox, attempt: Attempt, cold: bool) -> bool:
        """Hand the attempt to the sandbox and wait, bounded, for its outcome; False if the sandbox was gone."""
        kill = False
        with sandbox.cond:
            if sandbox.dead and not cold and sandbox.init_error is None:
                return False
            attempt.cold = cold
            attempt.assigned_mono, attempt.assigned_wall = time.monotonic(), time.time()
            if sandbox.init_error is not None:
                attempt.finish("init_error", sandbox.init_error, error_type_of(sandbox.init_error))
            elif sandbox.dead:
                sandbox.settle_exited(attempt)
            sandbox.current = attempt
            sandbox.cond.notify_all()
            self._memory.wake()
            while not attempt.finished:
                limit = attempt.deadline_mono if attempt.delivered else attempt.assigned_mono + self._init_timeout_s
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    if attempt.delivered:
                        message = f"Task timed out after {attempt.fn.timeout_s:.2f} seconds"
                    else:
                        message = f"Init timed out after {self._init_timeout_s:.2f} seconds"
                    error = function_error(attempt.request_id, "Sandbox.Timedout", message)
                    attempt.finish("timeout", error, "Sandbox.Timedout")
                    kill = True
                    break
                sandbox.cond.wait(remaining)
            sandbox.current = None
            sandbox.cond.notify_all()
        if kill:
            log.info("%s %s timed out; killing runtime pid %s", attempt.fn.name, attempt.request_id, sandbox.pid)
            sandbox.kill()
        return True
