"""Runtime processes: starting a sandbox's ``python -m awslambdaric``, its environment, its end.

Each process gets a Runtime API port of its own (served by the frontend), the environment
AWS gives a Python runtime, its own process group (so a kill takes its children too), and
two threads: one copies its output to the function's log, one waits for it to exit.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from lambdaml import settings
from lambdaml.local.lambda_service.frontend import Frontend
from lambdaml.local.lambda_service.functions import Functions
from lambdaml.local.lambda_service.models import LATEST, FunctionConfig, Stopping
from lambdaml.local.lambda_service.records import InvocationLog
from lambdaml.local.lambda_service.runtime_api import RuntimeApi
from lambdaml.local.lambda_service.sandboxes import Sandbox

log = logging.getLogger(__name__)

_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH")
# Run with a runtime layer, the interpreter sees the standard library and exactly what Lambda's
# would: the task root, the function's layers, then the runtime's own packages (-I -S: no site,
# no PYTHON* variables, no current directory).
_BOOTSTRAP = (
    "import runpy, sys; handler, *paths = sys.argv[1:]; sys.path[:0] = paths; "
    "sys.argv = ['awslambdaric', handler]; runpy.run_module('awslambdaric', run_name='__main__', alter_sys=True)"
)


class Spawner:
    """Starts runtime processes once the service has a ``frontend`` (set by ``LambdaService.start``)."""

    def __init__(
        self,
        functions: Functions,
        records: InvocationLog,
        runtime_api: RuntimeApi,
        *,
        python: str,
        runtime_dir: str | None,
        region: str,
        extra_environment: Mapping[str, str],
        stopping: threading.Event,
    ) -> None:
        self.frontend: Frontend | None = None
        self._functions = functions
        self._records = records
        self._runtime_api = runtime_api
        self._python = python
        self._runtime_dir = runtime_dir
        self._region = region
        self._extra_env = dict(extra_environment)
        self._stopping = stopping

    def spawn(self, sandbox: Sandbox) -> None:
        """Start the runtime process of a new sandbox, with a Runtime API port of its own."""
        if self.frontend is None or self._stopping.is_set():
            raise Stopping
        fn = sandbox.fn
        sandbox.sock = self.frontend.listen("127.0.0.1", 0, lambda c, a: self._runtime_api.serve(sandbox, c, a))
        sandbox.port = int(sandbox.sock.getsockname()[1])
        sandbox.spawned_mono = time.monotonic()
        try:
            sandbox.process = subprocess.Popen(
                self.command(fn),
                cwd=os.fspath(fn.code_dir),
                env=self.environment(sandbox),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill takes its children too
            )
        except OSError:
            self.frontend.unlisten(sandbox.sock)
            raise
        log.debug("started runtime %s pid %d on port %d", sandbox.id, sandbox.process.pid, sandbox.port)
        for target, name in ((self._reap, "reap"), (self._pump_output, "out")):
            thread = threading.Thread(target=target, args=(sandbox,), name=f"{sandbox.id}-{name}", daemon=True)
            thread.start()
            sandbox.threads.append(thread)
        if self._stopping.is_set():
            sandbox.kill()

    def command(self, fn: FunctionConfig) -> list[str]:
        if self._runtime_dir is None:  # the service's own interpreter and its packages (tests' handlers)
            return [self._python, "-m", "awslambdaric", fn.handler]
        paths = [os.path.abspath(os.fspath(fn.code_dir)), *fn.layers, self._runtime_dir]
        return [self._python, "-I", "-S", "-u", "-c", _BOOTSTRAP, fn.handler, *paths]

    def environment(self, sandbox: Sandbox) -> dict[str, str]:
        fn = sandbox.fn
        code_dir = os.path.abspath(os.fspath(fn.code_dir))
        env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
        env.update(
            {
                "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{sandbox.port}",
                "_HANDLER": fn.handler,
                "AWS_LAMBDA_FUNCTION_NAME": fn.name,
                "AWS_LAMBDA_FUNCTION_VERSION": LATEST,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn.memory_mb),
                "AWS_LAMBDA_FUNCTION_TIMEOUT": f"{fn.timeout_s:g}",
                "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
                "AWS_LAMBDA_LOG_GROUP_NAME": fn.log_group_name,
                "AWS_LAMBDA_LOG_STREAM_NAME": sandbox.log_stream,
                "AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}",
                "AWS_REGION": self._region,
                "AWS_DEFAULT_REGION": self._region,
                "AWS_ACCESS_KEY_ID": settings.LOCAL_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": settings.LOCAL_SECRET_KEY,
                "LAMBDA_TASK_ROOT": code_dir,
                "LAMBDA_RUNTIME_DIR": self._runtime_dir or "",
                "PYTHONPATH": code_dir,
                "PYTHONUNBUFFERED": "1",
                "TZ": ":UTC",
            }
        )
        env.update(self._extra_env)
        env.update(fn.environment)
        return env

    def _reap(self, sandbox: Sandbox) -> None:
        """Wait for the runtime to exit; an attempt it was running fails as AWS reports a runtime exit."""
        assert sandbox.process is not None
        code = sandbox.process.wait()  # bounded by stop(), which kills every runtime
        with sandbox.cond:
            sandbox.dead = True
            attempt = sandbox.current
            if attempt is not None and not attempt.finished:
                sandbox.settle_exited(attempt)
            sandbox.cond.notify_all()
        if not sandbox.retired:
            log.info("runtime %s (pid %d) exited with %s", sandbox.id, sandbox.process.pid, code)
        assert self.frontend is not None
        self.frontend.unlisten(sandbox.sock)
        pool = self._functions.find_pool(sandbox.fn.name)
        if pool is not None:
            pool.discard(sandbox)

    def _pump_output(self, sandbox: Sandbox) -> None:
        """Copy the runtime's output to the function's log (and to the Tail of the current attempt)."""
        assert sandbox.process is not None and sandbox.process.stdout is not None
        with sandbox.process.stdout as out:
            for line in iter(out.readline, b""):
                self._records.write(sandbox, line)
                attempt = sandbox.current
                if attempt is not None and attempt.tail is not None:
                    attempt.tail.append(line)
