"""IaaS on this machine: W worker processes started by ``torchrun``, synchronizing over gloo.

The serverful baseline of the FaaS-versus-IaaS comparison: the same worker core, models
and algorithms, with torch.distributed in place of a storage channel. The run is billed as
W EC2 instances of the job's ``iaas.instance_type`` for its wall time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lambdaml.backends.base import EventCallback, JobEvent, MachineBackend, ProgressCallback, Run, StepEvent
from lambdaml.config import JobSpec
from lambdaml.errors import ConfigError, JobFailed
from lambdaml.interrupts import sigint_blocked
from lambdaml.runtime.iaas import cluster_cost
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import WorkerReport, WorkerRow
from lambdaml.runtime.results import collect_reports

_SILENCE_GRACE_S = 60.0  # on top of the sync timeout: torchrun and torch imports take a while
_POLL_S = 0.05
_ERROR_SETTLE_S = 2.0  # after a rank's error, how long to collect the others' before stopping


def torchrun_command(
    job_id: str, workers: int, storage: Any, *, attempt: int = 1, events: str | None = None
) -> list[str]:
    """``torchrun`` on one node with ``workers`` processes, each a ``lambdaml.runtime.iaas`` rank."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    command += ["--nproc-per-node", str(workers), "--module", "lambdaml.runtime.iaas"]
    command += ["--job-id", job_id, "--attempt", str(attempt)]
    command += ["--bucket", storage.bucket, "--region", storage.region]
    if storage.endpoint_url:
        command += ["--endpoint-url", storage.endpoint_url]
    if events:
        command += ["--events", events]
    return command


@dataclass
class _Torchrun:
    process: subprocess.Popen[bytes]
    tmp: tempfile.TemporaryDirectory[str]
    log_file: IO[bytes]

    @property
    def events_dir(self) -> Path:
        return Path(self.tmp.name)

    @property
    def log_path(self) -> Path:
        return self.events_dir / "torchrun.log"


class IaaSLocalBackend(MachineBackend):
    name = "iaas-local"
    uses_channel = False

    def check(self, job: JobSpec) -> None:
        if job.sync.protocol != "bsp":
            raise ConfigError(
                f"the iaas backends run protocol 'bsp' only (gloo collectives), not {job.sync.protocol!r}"
            )
        if importlib.util.find_spec("torch") is None:
            raise ConfigError("the iaas-local backend needs torch: pip install 'lambdaml[torch]'")

    def start(self, job: JobSpec, attempt: Attempt, secret: bytes | None) -> _Torchrun:
        env = {
            **os.environ,
            "GLOO_SOCKET_IFNAME": "lo",  # keep gloo on loopback, whatever the host's name resolves to
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "TORCHELASTIC_ERROR_FILE": "",
        }
        tmp = tempfile.TemporaryDirectory(prefix="lambdaml-iaas-")
        log_file = (Path(tmp.name) / "torchrun.log").open("wb")
        command = torchrun_command(attempt.job_id, job.workers, job.storage, attempt=attempt.number, events=tmp.name)
        with sigint_blocked():  # torchrun and its ranks never see Ctrl-C: stop() ends them
            process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        return _Torchrun(process, tmp, log_file)

    def collect(
        self, run: Run, on_event: EventCallback | None, on_progress: ProgressCallback | None = None
    ) -> list[WorkerReport]:
        torchrun: _Torchrun = run.handle
        self._follow(run.job, torchrun.process, torchrun.events_dir, torchrun.log_path, on_event, on_progress)
        return collect_reports(self.store(), run.job, run.attempt)

    def stop(self, run: Run) -> None:
        torchrun: _Torchrun = run.handle
        process = torchrun.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        torchrun.log_file.close()
        torchrun.tmp.cleanup()

    def cost(self, job: JobSpec, workers: Sequence[WorkerRow], wall_s: float) -> dict[str, Any]:
        return cluster_cost(job, workers, wall_s)

    def _follow(
        self,
        job: JobSpec,
        process: subprocess.Popen[bytes],
        events_dir: Path,
        log_path: Path,
        on_event: EventCallback | None,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        """Relay the ranks' progress until torchrun exits; fail on the first rank's error."""
        silence_limit = job.sync.timeout_s + _SILENCE_GRACE_S
        last_heard = time.monotonic()
        readers: dict[Path, IO[str]] = {}
        done: set[int] = set()
        errors: list[dict[str, Any]] = []
        try:
            while True:
                exited = process.poll() is not None
                for path in sorted(events_dir.glob("rank*.jsonl")):
                    reader = readers.get(path) or readers.setdefault(path, path.open())
                    for line in reader.readlines():
                        last_heard = time.monotonic()
                        event = json.loads(line)
                        if event["kind"] == "error":
                            errors.append(event)
                        elif event["kind"] == "done":
                            done.add(event["rank"])
                        elif event["kind"] == "steps":
                            if on_progress is not None:
                                on_progress(StepEvent(event["rank"], event["epoch"], event["step"], event["steps"]))
                        elif on_event is not None:
                            on_event(JobEvent(event["rank"], event["epoch"], event["loss"], event["elapsed_s"]))
                if exited:
                    break
                if errors and time.monotonic() - last_heard > _ERROR_SETTLE_S:
                    break  # the other ranks have had time to report what they saw
                if time.monotonic() - last_heard > silence_limit:
                    raise JobFailed(f"no worker reported for {silence_limit:g}s; giving up")
                time.sleep(_POLL_S)
        finally:
            for reader in readers.values():
                reader.close()
        if errors:
            # One rank's failure makes its peers' collectives fail too: report the cause.
            cause = next((e for e in errors if e.get("type") != "SyncTimeout"), errors[0])
            raise JobFailed(f"worker {cause['rank']} failed: {cause['message']}")
        if process.returncode != 0 or len(done) < job.workers:
            raise JobFailed(f"torchrun exited with code {process.returncode}: {_last_line(log_path)}")


def _last_line(path: Path) -> str:
    """The last meaningful line torchrun or a worker printed, for the error message."""
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][:500]
