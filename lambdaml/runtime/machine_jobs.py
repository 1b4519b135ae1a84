"""The jobs this machine ran: one record each, in ``LAMBDAML_HOME/jobs/ID/record.json``.

Workers that run here (``--backend local``, ``iaas-local``) record their job in this registry
as it starts, runs and ends, beside its state record in the data bucket: ``lambdaml jobs``,
``status``, ``logs``, ``attach`` and ``cancel`` then find it with no stack, endpoint or region,
even once the store it ran on is gone (the demo's embedded moto). A record holds the
registry's fields (``JobRecord``) and what only this machine knows: the job's name, backend,
dataset and storage, where its result file went, and the process that runs it.

Each job has a folder of its own, so two jobs never write one file. A write replaces the
record whole (a temporary file, then a rename) under a lock on the job's folder, so a reader
never sees half a record, and two writers of one job (the job, and ``lambdaml cancel`` in
another terminal) keep each other's fields. As in the bucket, an older attempt's record never
replaces a newer one's, and within an attempt the first ending stands (a cancel excepted).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from lambdaml import keys, settings
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec
from lambdaml.errors import CodecError, ConfigError, LambdaMLError
from lambdaml.runtime import records
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.registry import JobRecord, JobRegistry, JobSummary, malformed
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.status import ending_stands

log = logging.getLogger(__name__)

RECORD_FILE = "record.json"
RESULT_FILE = "result.json"
#: What ``MachineRegistry.describe`` adds to a record: what only this machine knows of a job.
DETAILS = frozenset(
    {"name", "backend", "dataset", "epochs", "timeout_s", "storage", "result_path", "pid", "host", "process"}
)


def jobs_folder() -> Path:
    """Where this machine keeps its jobs: ``LAMBDAML_HOME/jobs`` (default ``~/.lambdaml/jobs``)."""
    return settings.home() / "jobs"


def shown(path: Path) -> str:
    """A path as a user reads it: under their home folder, ``~/...``."""
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) and path != home else str(path)


@dataclass(frozen=True)
class MachineJob:
    """A job run on this machine: its registry record, and what only this machine knows of it."""

    record: JobRecord
    folder: Path
    name: str | None = None
    backend: str | None = None
    dataset: str | None = None
    epochs: int | None = None
    timeout_s: float | None = None  # the job's sync timeout: how long a follower waits for a sign of life
    storage: dict[str, object] | None = None  # bucket, endpoint_url, region
    result_path: str | None = None
    pid: int | None = None  # the process that runs (ran) the job, on ``host``
    host: str | None = None
    process: str | None = None  # that process's start time, where /proc tells it: a pid is reused
    stored_state: str = ""  # the state as recorded; ``record.state`` says "interrupted" for a dead process's

    @classmethod
    def from_json(cls, data: Any, folder: Path) -> MachineJob:
        """From a record file's JSON; a CodecError saying what is wrong if it is malformed."""
        try:
            return cls._from_json(data, folder)
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(malformed(exc)) from None

    @classmethod
    def _from_json(cls, data: Any, folder: Path) -> MachineJob:
        if not isinstance(data, dict):
            raise TypeError(f"a JSON object, not {type(data).__name__}")
        record = JobRecord.from_status(keys.check_name(str(data["job_id"]), "job id"), data)
        storage = data.get("storage")
        if storage is not None and not isinstance(storage, dict):
            raise TypeError("storage is not an object")

        def optional(name: str, kind: Callable[[Any], Any]) -> Any:
            value = data.get(name)
            return None if value is None else kind(value)

        job = cls(
            record=record,
            folder=folder,
            name=optional("name", str),
            backend=optional("backend", str),
            dataset=optional("dataset", str),
            epochs=optional("epochs", int),
            timeout_s=optional("timeout_s", float),
            storage=storage,
            result_path=optional("result_path", str),
            pid=optional("pid", int),
            host=optional("host", str),
            process=optional("process", str),
            stored_state=record.state,
        )
        if record.state == records.RUNNING and job.alive() is False:
            # Its process ended without recording how (killed, or its machine restarted): not running.
            gone = f"its process {job.pid} on this machine ended without recording how"
            return replace(job, record=replace(record, state=records.INTERRUPTED, error=record.error or gone))
        return job

    def alive(self) -> bool | None:
        """Whether the process that runs the job is still there; None where this machine cannot tell."""
        if self.pid is None or self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # another user's process: there, whoever it is
        return self.process is None or _process_token(self.pid) in (None, self.process)

    @property
    def job_id(self) -> str:
        return self.record.job_id

    def storage_spec(self, **changes: object) -> StorageSpec | None:
        """The data bucket the job's records are in, as the job named it (with ``changes``: a shorter wait, say)."""
        if not self.storage:
            return None
        named = {k: v for k, v in self.storage.items() if k in ("bucket", "endpoint_url", "region")}
        return StorageSpec.model_validate({**named, **changes})

    def where(self) -> str:
        """The job's store in words: ``s3://BUCKET/ at ENDPOINT``."""
        spec = self.storage_spec()
        if spec is None:
            return "an unrecorded store"
        return f"s3://{spec.bucket}/" + (f" at {spec.endpoint_url}" if spec.endpoint_url else f" ({spec.region})")

    def result(self) -> JobResult | None:
        """The job's result, as kept here when it succeeded; None if there is none."""
        path = self.folder / RESULT_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{shown(path)} is unreadable: {exc}") from None
        return JobResult.from_json(data, shown(path))

    def summary(self, now: float) -> MachineJobSummary:
        """What ``jobs --output json`` prints of it: the registry's fields, then this machine's."""
        return {
            **self.record.summary(now),
            "name": self.name,
            "backend": self.backend,
            "dataset": self.dataset,
            "storage": self.storage,
            "result_path": self.result_path,
            "pid": self.pid,
            "folder": str(self.folder),
        }


class MachineJobSummary(JobSummary):
    """A job run here as ``jobs --output json`` prints it: the registry's fields, then this machine's."""

    name: str | None
    backend: str | None
    dataset: str | None
    storage: dict[str, object] | None  # bucket, endpoint_url, region
    result_path: str | None
    pid: int | None
    folder: str


class MachineRegistry(JobRegistry):
    """The records of the jobs this machine ran, a file each under ``root`` (default ``jobs_folder()``)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = jobs_folder() if root is None else root
        #: One line for each record file ``pages`` left out, saying why.
        self.refused: list[str] = []

    def folder(self, job_id: str) -> Path:
        return self.root / keys.check_name(job_id, "job id")

    def save(self, record: JobRecord) -> None:
        """Write a job's registry fields, unless a later attempt's record, or an ending of this attempt, is there."""

        def update(current: dict[str, object] | None) -> dict[str, object] | None:
            recorded = _recorded(record.job_id, current)
            if recorded is not None and not _replaces(record, recorded):
                log.debug("job %s: a newer record is in %s", record.job_id, self.root)
                return None
            fields = asdict(record)
            if recorded is not None:
                fields["created_at"] = min(recorded.created_at, record.created_at)  # the job's first start
            return {**(current or {}), **fields}

        self._update(record.job_id, update)

    def describe(self, job_id: str, **details: object) -> None:
        """Add what only this machine knows of a job (``MachineJob``'s other fields) to its record."""
        unknown = set(details) - DETAILS
        if unknown:
            raise ValueError(f"not details of a machine's job: {sorted(unknown)}")
        self._update(job_id, lambda current: {"job_id": job_id, **(current or {}), **details})

    def keep_result(self, result: JobResult) -> None:
        """Keep a succeeded job's result beside its record, for ``attach`` and ``status`` once its store is gone."""
        folder = self.folder(result.job_id)
        folder.mkdir(parents=True, exist_ok=True)
        _write_whole(folder / RESULT_FILE, json.dumps(result.to_json(), indent=1))

    def job(self, job_id: str) -> MachineJob | None:
        """The job's record; None if this machine has none; a malformed one is refused in one line."""
        folder = self.folder(job_id)
        path = folder / RECORD_FILE
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"{shown(path)} is unreadable: {exc.strerror or exc}") from None
        try:
            job = MachineJob.from_json(json.loads(text), folder)
        except ValueError as exc:  # not JSON
            raise ConfigError(f"{shown(path)} is not a job record: {malformed(exc)}") from None
        except CodecError as exc:
            raise ConfigError(f"{shown(path)} is not a job record: {exc}") from None
        if job.job_id != job_id:
            raise ConfigError(f"{shown(path)} is not a job record: it holds job {job.job_id!r}, not {job_id!r}")
        return job

    def jobs(self) -> list[MachineJob]:
        """Every job's record, in no particular order; a malformed one is left out and named in ``refused``."""
        self.refused = []
        found = []
        try:
            folders = sorted(p for p in self.root.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []
        for folder in folders:
            if not keys.NAME_PATTERN.fullmatch(folder.name) or not (folder / RECORD_FILE).exists():
                continue  # not a job's folder (or one whose first write has yet to land)
            try:
                job = self.job(folder.name)
            except ConfigError as exc:
                self.refused.append(str(exc))
                continue
            if job is not None:
                found.append(job)
        return found

    def newest_jobs(self, state: str | None = None) -> list[MachineJob]:
        found = [j for j in self.jobs() if state is None or j.record.state == state]
        return sorted(found, key=lambda j: (j.record.created_at, j.job_id), reverse=True)

    def pages(self) -> Iterator[list[JobRecord]]:
        yield [job.record for job in self.jobs()]

    def _update(self, job_id: str, change: Callable[[dict[str, object] | None], dict[str, object] | None]) -> None:
        """Read, change and replace a job's record whole, under its folder's lock (as JSON: the fields
        another version wrote are kept)."""
        folder = self.folder(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / RECORD_FILE
        with _locked(folder):
            try:
                current = json.loads(path.read_text())
                if not isinstance(current, dict):
                    raise TypeError("not a JSON object")
            except FileNotFoundError:
                current = None
            except (OSError, TypeError, ValueError) as exc:
                log.warning("%s was unreadable (%s); writing it anew", shown(path), malformed(exc))
                current = None
            changed = change(current)
            if changed is not None:
                _write_whole(path, json.dumps(changed, indent=1, sort_keys=True))


def _recorded(job_id: str, current: Mapping[str, object] | None) -> JobRecord | None:
    """The registry's fields of a record file's content; None for details only, so far (or a malformed record,
    which a write replaces)."""
    if current is None or "state" not in current:
        return None
    try:
        return JobRecord.from_status(job_id, current)
    except CodecError as exc:
        log.warning("job %s: its record here was malformed (%s); writing it anew", job_id, exc)
        return None


def _replaces(record: JobRecord, current: JobRecord) -> bool:
    """Whether ``record`` may replace ``current`` (as ``records.set_status`` decides in the bucket)."""
    if record.attempt != current.attempt:
        return record.attempt > current.attempt
    if ending_stands(current.state, record.state):
        return record.state == current.state and record.updated_at >= current.updated_at
    return record.updated_at >= current.updated_at


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_whole(path: Path, text: str) -> None:
    """Replace a file in one step: readers see the old text or the new, never part of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _process_token(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (Linux's /proc); None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command's name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


# --- what the backends of this machine record ------------------------------------------------


def record_start(store: Channel, job: JobSpec, attempt: Attempt, backend: str) -> None:
    """A job's attempt started here: what it is, where it runs, and its state record."""
    record_state(store, attempt, records.RUNNING)  # first: a reader never finds details alone
    registry = MachineRegistry()
    storage = job.storage.model_dump(include={"bucket", "endpoint_url", "region"})
    pid = os.getpid()
    _guarded(
        attempt.job_id,
        lambda: registry.describe(
            attempt.job_id,
            name=job.name,
            backend=backend,
            dataset=job.dataset,
            epochs=job.algorithm.epochs,
            timeout_s=job.sync.timeout_s,
            storage=storage,
            pid=pid,
            host=socket.gethostname(),
            process=_process_token(pid),
        ),
    )


def record_state(store: Channel, attempt: Attempt, state: str, *, error: str | None = None) -> None:
    """Copy the job's state record from the bucket (the truth); if the bucket is out of reach, record ``state``."""
    if copy_state(store, attempt.job_id, attempt.number):
        return
    now = time.time()
    ended = now if state in records.ENDED else None
    record = JobRecord(attempt.job_id, state, attempt.number, attempt.started_at, now, finished_at=ended, error=error)
    registry = MachineRegistry()
    _guarded(attempt.job_id, lambda: registry.save(record))


def copy_state(store: Channel, job_id: str, attempt: int | None = None) -> bool:
    """Copy the job's state record (of ``attempt``, if given) from the bucket here; False if it is out of reach."""
    try:
        recorded = records.status(store, job_id)
        record = JobRecord.from_status(job_id, recorded) if recorded.known else None
    except LambdaMLError as exc:  # a CodecError included: a malformed record is as good as none
        log.debug("job %s: its state record is out of reach (%s)", job_id, exc)
        return False
    if record is None or (attempt is not None and record.attempt != attempt):
        return False
    registry = MachineRegistry()
    _guarded(job_id, lambda: registry.save(record))
    return True


def record_result(result: JobResult) -> None:
    """A job succeeded here: keep its result, before its record says so (``attach`` then finds both)."""
    registry = MachineRegistry()
    _guarded(result.job_id, lambda: registry.keep_result(result))


def record_result_path(job_id: str, path: str) -> None:
    """Where the job's result file went on this machine."""
    registry = MachineRegistry()
    _guarded(job_id, lambda: registry.describe(job_id, result_path=str(Path(path).resolve())))


def _guarded(job_id: str, write: Callable[[], None]) -> None:
    """A write to this machine's registry: one that fails is a warning, never the job's failure."""
    try:
        write()
    except OSError as exc:
        warn_once(f"job {job_id} is not (all) in this machine's job list ({shown(jobs_folder())}): {exc}")


_warned = False


def warn_once(message: str) -> None:
    """Say that this machine's job folder cannot be written, once a process (a job writes it often)."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("%s", message)


# --- a job whose process is gone ---------------------------------------------------------------


def owner_gone(job_id: str, bucket: str) -> MachineJob | None:
    """The job's record here if it says running in ``bucket`` while its process has gone (killed, or
    this machine restarted: the pid is free, or another process's); None otherwise, or where this
    machine cannot tell (another host's job, a record without a pid)."""
    try:
        job = MachineRegistry().job(job_id)
    except ConfigError as exc:
        log.debug("job %s: %s", job_id, exc)
        return None
    if job is None or job.stored_state != records.RUNNING or job.alive() is not False:
        return None
    return job if (job.storage or {}).get("bucket") == bucket else None


def interrupt_if_owner_gone(store: Channel, job_id: str, bucket: str) -> bool:
    """Record, in the bucket and here, that a job whose process is gone was interrupted; True if it was.

    Only the attempt this machine ran, and only while the bucket still calls it running: a later
    attempt, or an ending recorded meanwhile, stands. It ended when it was last heard from.
    """
    job = owner_gone(job_id, bucket)
    if job is None:
        return False
    record = records.status(store, job_id)
    number = record.attempt
    if record.state != records.RUNNING or number != job.record.attempt:
        return False
    ended = time.time() if record.updated_at is None else record.updated_at
    try:
        spec = records.stored_job(store, job_id)
        ended = records.last_sign_of_life(store, spec, records.read_attempt(store, job_id, number), record)
    except LambdaMLError as exc:  # no spec or claim to read heartbeats by: its state's last change
        log.debug("job %s: %s", job_id, exc)
    error = job.record.error or f"its process {job.pid} on this machine ended without recording how"
    standing = records.set_status(store, job_id, number, records.INTERRUPTED, error=error, finished_at=ended)
    copy_state(store, job_id)
    log.info("job %s: its process %s is gone; recorded as %s", job_id, job.pid, standing)
    return standing == records.INTERRUPTED


def orphans_in(bucket: str) -> list[str]:
    """The jobs this machine ran in ``bucket`` whose process is gone while their record says running."""
    return [j.job_id for j in MachineRegistry().jobs() if owner_gone(j.job_id, bucket) is not None]
