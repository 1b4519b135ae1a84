"""IaaS on this machine: W worker processes started by ``torchrun``, synchronizing over gloo.

The serverful baseline of the FaaS-versus-IaaS comparison: the same worker core, models
and algorithms, with torch.distributed in place of a storage channel. The run is billed as
W EC2 instances of the job's ``iaas.instance_type`` for its wall time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lambdaml.backends.base import EventCallback, JobEvent, MachineBackend, ProgressCallback, Run, StepEvent
from lambdaml.config import JobSpec
from lambdaml.cost import JobCost
from lambdaml.errors import ConfigError, JobFailed
from lambdaml.interrupts import sigint_blocked
from lambdaml.runtime import torchrun_local
from lambdaml.runtime.iaas import ErrorLine, RankEvent, cluster_cost
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import WorkerReport, WorkerRow
from lambdaml.runtime.results import collect_reports

log = logging.getLogger(__name__)

_SILENCE_GRACE_S = 60.0  # on top of the sync timeout: torchrun and torch imports take a while
_POLL_S = 0.05
_ERROR_SETTLE_S = 2.0  # after a rank's error, how long to collect the others' before stopping
_STOP_GRACE_S = 10.0  # for torchrun to stop its ranks on SIGTERM (they checkpoint nothing on the way)


def torchrun_command(
    job_id: str, workers: int, storage: Any, *, attempt: int = 1, events: str | None = None
) -> list[str]:
    """``torchrun`` on one node, listening on loopback only, with ``workers`` processes, each a
    ``lambdaml.runtime.iaas`` rank."""
    command = ["--job-id", job_id, "--attempt", str(attempt)]
    command += ["--bucket", storage.bucket, "--region", storage.region]
    if storage.endpoint_url:
        command += ["--endpoint-url", storage.endpoint_url]
    if events:
        command += ["--events", events]
    return torchrun_local.command(workers, "lambdaml.runtime.iaas", command)


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
        env = torchrun_local.loopback_env()  # nothing listens beyond this machine
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
            ranks = _descendants(process.pid)  # before torchrun goes: orphans could not be found
            process.terminate()  # torchrun passes it on to its ranks
            try:
                process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                # A stopped (SIGSTOP) rank never handles SIGTERM, and torchrun waits for it.
                log.info("torchrun did not stop within %gs; killing it and its ranks", _STOP_GRACE_S)
                for pid in [*_descendants(process.pid), *ranks]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                process.kill()
                process.wait(timeout=_STOP_GRACE_S)  # SIGKILL ends even a stopped process
        torchrun.log_file.close()
        torchrun.tmp.cleanup()

    def cost(self, job: JobSpec, workers: Sequence[WorkerRow], wall_s: float) -> JobCost:
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
        heard = _Heard(last_s=time.monotonic(), on_event=on_event, on_progress=on_progress)
        readers: dict[Path, IO[str]] = {}
        try:
            while True:
                exited = process.poll() is not None
                for path in sorted(events_dir.glob("rank*.jsonl")):
                    heard.read(readers.get(path) or readers.setdefault(path, path.open()))
                settled = heard.errors and time.monotonic() - heard.last_s > _ERROR_SETTLE_S
                if exited or settled:
                    break  # after an error, the other ranks have had time to report what they saw
                if time.monotonic() - heard.last_s > silence_limit:
                    raise JobFailed(f"no worker reported for {silence_limit:g}s; giving up")
                time.sleep(_POLL_S)
        finally:
            for reader in readers.values():
                reader.close()
        if heard.errors:
            # One rank's failure makes its peers' collectives fail too: report the cause.
            cause = next((e for e in heard.errors if e.get("type") != "SyncTimeout"), heard.errors[0])
            raise JobFailed(f"worker {cause['rank']} failed: {cause['message']}")
        if process.returncode != 0 or len(heard.done) < job.workers:
            raise JobFailed(f"torchrun exited with code {process.returncode}: {_last_line(log_path)}")


@dataclass
class _Heard:
    """What the ranks' event files (``lambdaml.runtime.iaas``) have said: progress is passed on as it comes."""

    last_s: float  # when a rank last wrote (time.monotonic)
    on_event: EventCallback | None
    on_progress: ProgressCallback | None
    done: set[int] = field(default_factory=set)
    errors: list[ErrorLine] = field(default_factory=list)

    def read(self, reader: IO[str]) -> None:
        """The lines a rank's file has gained since the last read."""
        for line in reader.readlines():
            self.last_s = time.monotonic()
            self.take(json.loads(line))

    def take(self, event: RankEvent) -> None:
        rank = event["rank"]
        if event["kind"] == "error":
            self.errors.append(event)
        elif event["kind"] == "done":
            self.done.add(rank)
        elif event["kind"] == "steps":
            if self.on_progress is not None:
                self.on_progress(StepEvent(rank, event["epoch"], event["step"], event["steps"]))
        elif self.on_event is not None:
            self.on_event(JobEvent(rank, event["epoch"], event["loss"], event["elapsed_s"]))


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from Linux's /proc (none where there is no /proc)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:  # the thread or the process ended meanwhile
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def _last_line(path: Path) -> str:
    """The last meaningful line torchrun or a worker printed, for the error message."""
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1][:500]
