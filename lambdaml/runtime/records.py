"""A job's records in the data bucket: its claim, its attempts, its state.

A job id is claimed exactly once: the job's spec is written with a conditional put (S3's
``If-None-Match: *``), before anything runs, so a reused id is refused at once and two
starts of one id cannot both win. Each run of the job is an attempt, claimed the same way
(``attempts/aNNNN.json``): it pins the dataset version the job trains on and, for a
resumed job, the checkpoint round it continues from. Workers of one attempt read and write
only that attempt's checkpoints, heartbeats, reports and channel keys.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, parse_job
from lambdaml.errors import CodecError, ConfigError, JobCancelled, KeyNotFound
from lambdaml.runtime.checkpoint import periodic_rounds
from lambdaml.runtime.registry import BucketRegistry, JobRecord, JobRegistry, JobSummary
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.status import CANCELLED as CANCELLED
from lambdaml.runtime.status import ENDED as ENDED
from lambdaml.runtime.status import FAILED as FAILED
from lambdaml.runtime.status import INTERRUPTED as INTERRUPTED
from lambdaml.runtime.status import RUNNING as RUNNING
from lambdaml.runtime.status import SUCCEEDED as SUCCEEDED
from lambdaml.runtime.status import JobStatus, ending_stands
from lambdaml.storage import get_json, put_json


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed attempt starts: the periodic checkpoint of ``round`` written by attempt ``attempt``."""

    attempt: int
    round: int


class ResumeJson(TypedDict):
    attempt: int
    round: int


class AttemptJson(TypedDict):
    """An attempt's claim as stored (``attempts/aNNNN.json``)."""

    job_id: str
    number: int
    dataset_version: str
    started_at: float
    resume: ResumeJson | None
    nonce: str
    earlier_s: float


@dataclass(frozen=True)
class Attempt:
    """One run of a job, as claimed in ``attempts/aNNNN.json``."""

    job_id: str
    number: int
    dataset_version: str
    started_at: float
    resume: ResumePoint | None = None
    nonce: str = ""  # tells this attempt's claim from another's with the same number
    earlier_s: float = 0.0  # how long the job's earlier attempts ran, together

    def to_json(self) -> AttemptJson:
        resume = self.resume
        return {
            "job_id": self.job_id,
            "number": self.number,
            "dataset_version": self.dataset_version,
            "started_at": self.started_at,
            "resume": None if resume is None else {"attempt": resume.attempt, "round": resume.round},
            "nonce": self.nonce,
            "earlier_s": self.earlier_s,
        }

    @classmethod
    def from_json(cls, data: Any, what: str = "attempt record") -> Attempt:
        try:
            resume = data.get("resume")
            return cls(
                job_id=keys.check_name(data["job_id"], "job id"),
                number=int(data["number"]),
                dataset_version=keys.check_name(data["dataset_version"], "dataset version"),
                started_at=float(data["started_at"]),
                resume=None if resume is None else ResumePoint(int(resume["attempt"]), int(resume["round"])),
                nonce=str(data.get("nonce", "")),
                earlier_s=float(data.get("earlier_s", 0.0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"{what} is malformed: {exc}") from None


#: Parts of a job that change nothing it computes: a job resumed with another of them is the same job.
_NOT_COMPUTED = frozenset({"tracking"})


def _computed(job: JobSpec) -> dict[str, object]:
    return {k: v for k, v in job.model_dump(mode="json").items() if k not in _NOT_COMPUTED}


def spec_hash(job: JobSpec) -> str:
    """A fingerprint of what a job computes, to tell a resumed job file from a different one.

    Where it is tracked is no part of it (and a job from before tracking existed hashes as it did).
    """
    canonical = json.dumps(_computed(job), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


# --- state ----------------------------------------------------------------------


def status(store: Channel, job_id: str) -> JobStatus:
    """The job's state record (``JobStatus.unknown`` when it has none); a CodecError if it is malformed."""
    key = keys.job_status(job_id)
    try:
        return JobStatus.from_json(get_json(store, key), job_id, key)
    except KeyNotFound:
        return JobStatus.unknown(job_id)


#: Registries that keep a copy of every state record, besides the bucket: a stack's JobsTable,
#: set by its functions' handlers (``also_record_in``).
_registries: list[JobRegistry] = []


def also_record_in(registry: JobRegistry) -> None:
    """Copy every state this process records into ``registry`` too."""
    _registries[:] = [registry]


def set_status(store: Channel, job_id: str, attempt: int, state: str, **fields: object) -> str:
    """Record a state of ``attempt``; a later attempt's record is never overwritten by an earlier one's.

    Within one attempt the first ending stands (a cancel's stragglers, or a late duplicate,
    time out into it), except that a cancel overrides a failure it caused. The first ending is
    decided by a write-once marker (``end_attempt``), so a cancel and the finish that race each
    other cannot both win. Returns the state that stands for the attempt (the recorded one's,
    where this call changed nothing).
    """
    if state in ENDED:
        standing = end_attempt(store, job_id, attempt, state)
        if standing != state and (state != CANCELLED or standing == SUCCEEDED):
            return standing
    current = status(store, job_id)
    recorded = current.attempt if current.known else 0
    if recorded > attempt or (recorded == attempt and ending_stands(current.state, state)):
        return current.state
    changed = current.changed(attempt, state, fields, time.time())  # a new attempt's record is fresh
    put_json(store, keys.job_status(job_id), changed.to_json())
    for registry in _registries:
        registry.save(JobRecord.from_status(job_id, changed))
    return state


def cancel(store: Channel, job_id: str, cost: Callable[[int], Mapping[str, object]] | None = None) -> JobStatus:
    """Ask a running job to stop (its workers see the marker at their next heartbeat); its record after.

    ``cost`` gives the cost fields of the cancelled attempt (by its number), where the canceller
    prices it. A cancel that lost to the job's finish says so, though the record may be a moment behind.
    """
    current = status(store, job_id)
    if current.state != RUNNING:
        return current
    attempt = current.attempt
    store.put(keys.job_cancel(job_id, attempt), b"1")
    standing = set_status(store, job_id, attempt, CANCELLED, **(cost(attempt) if cost else {}))
    now = status(store, job_id)
    return now.with_state(standing) if now.attempt == attempt else now


def end_attempt(store: Channel, job_id: str, attempt: int, state: str) -> str:
    """Claim how ``attempt`` ended (``attempts/aNNNN.ended``, a conditional put); the ending that stands.

    Whoever creates the marker first wins: a finish that lost to a cancel must not advertise its
    model, and a cancel that lost to the finish reports that the job had already succeeded.
    """
    key = keys.job_attempt_ended(job_id, attempt)
    if store.put_new(key, json.dumps({"state": state, "at": time.time()}).encode()):
        return state
    try:
        first = get_json(store, key)
    except (KeyNotFound, CodecError):
        return state  # unreadable: the state record's own guard decides, as before markers
    ending = first.get("state") if isinstance(first, dict) else None
    return ending if isinstance(ending, str) and ending in ENDED else state


def finish(store: Channel, attempt: Attempt, result: JobResult) -> None:
    """Store a finished attempt's result, then mark the job succeeded with where its result and model are.

    Raises JobCancelled when a cancel ended the attempt first: the result goes again, and the state
    record, which alone advertises the model, never names it.
    """
    key = keys.job_result(attempt.job_id)
    put_json(store, key, result.to_json())
    try:
        cost: float | None = float(result.cost["total_dollars"])
    except (KeyError, TypeError, ValueError):
        cost = None  # a backend that does not price its runs
    standing = set_status(
        store, attempt.job_id, attempt.number, SUCCEEDED,
        finished_at=time.time(), result_key=key, model_uri=result.model_uri, cost_dollars=cost,
    )  # fmt: skip
    if standing != SUCCEEDED:
        store.delete([key])
        raise JobCancelled(f"job {attempt.job_id} was {standing} as it finished; its model is not used")


def job_summaries(registry: JobRegistry, *, now: float | None = None, state: str | None = None) -> list[JobSummary]:
    """Every job's record, newest first, with its duration so far: what ``jobs --output json`` prints."""
    now = time.time() if now is None else now
    return [record.summary(now) for record in registry.newest_first(state)]


def ended_jobs(store: Channel, *, older_than_s: float) -> list[str]:
    """The jobs that ended (succeeded, failed, cancelled, interrupted) at least ``older_than_s`` ago."""
    now = time.time()
    ended = [(r.job_id, r.ended_at) for r in BucketRegistry(store).newest_first() if r.state in ENDED]
    return [job_id for job_id, at in ended if at is not None and now - at >= older_than_s]


def attempt_ended(store: Channel, job_id: str, attempt: int) -> bool:
    """Whether the job has ended with ``attempt`` or a later one, by its state record read now.

    ``clean`` asks it again right before each delete: a job resumed since it was found ended runs
    again, and its new attempt may read the old one's checkpoints.
    """
    record = status(store, job_id)
    return record.state in ENDED and attempt <= record.attempt


def clean_jobs(store: Channel, ended: list[str], *, dry_run: bool = False, results: bool = False) -> dict[str, int]:
    """Delete what the attempts of ended jobs left in the bucket (checkpoints, heartbeats, reports, cancel markers).

    ``ended`` comes from ``ended_jobs``: a running job is never touched, and each attempt's keys
    go only if the job's state record, read again just before, still says it has ended (a job
    resumed in between keeps everything). Each job's spec, attempt claims, state, result and
    model stay, so ``jobs``, ``status`` and ``attach`` still answer; a failed job resumed later
    starts again from where it started. With ``results`` the result and the model go too (the
    record stays, so the job is still listed). Returns each cleaned job's count of removed keys
    (with ``dry_run``: of keys it would remove).
    """
    wanted = set(ended)
    outputs = {
        key: job_id
        for job_id in ended
        for key in (keys.job_result(job_id), keys.job_model(job_id), keys.job_model_card(job_id))
    }
    residue: dict[tuple[str, int], list[str]] = {}
    for key in store.list(keys.JOBS_PREFIX):
        job_id = keys.job_of_attempt_key(key)
        number = int(key.split("/")[2][1:]) if job_id is not None else 0  # jobs/ID/aNNNN/...
        if job_id is None and results:
            job_id = outputs.get(key)
        if job_id is not None and job_id in wanted:
            residue.setdefault((job_id, number), []).append(key)
    removed: dict[str, int] = {}
    for (job_id, number), job_keys in sorted(residue.items()):
        if not dry_run:
            if not attempt_ended(store, job_id, number):
                continue
            store.delete(job_keys)
        removed[job_id] = removed.get(job_id, 0) + len(job_keys)
    return dict(sorted(removed.items()))


# --- claiming ---------------------------------------------------------------------


def _describe(record: JobStatus) -> str:
    job_id = record.job_id
    if not record.known:
        return f"job id {job_id!r} is taken (claimed just now, or by a job that never started)"
    when = record.created_at
    since = f", created {time.strftime('%Y-%m-%d %H:%M', time.gmtime(when))} UTC" if when else ""
    return f"job id {job_id!r} is taken ({record.state}, attempt {record.attempt}{since})"


def claim_job(store: Channel, job: JobSpec, job_id: str, dataset_version: str) -> Attempt:
    """Claim a new job id and its first attempt; a taken id is refused in one line."""
    keys.check_name(job_id, "job id")
    spec = {**job.model_dump(mode="json"), "_claim": {"spec_hash": spec_hash(job), "nonce": secrets.token_hex(8)}}
    if not _create(store, keys.job_spec(job_id), spec):
        record = status(store, job_id)
        problem = _describe(record)
        if record.state == SUCCEEDED:
            raise ConfigError(f"{problem}: it has finished; choose another --job-id")
        raise ConfigError(
            f"{problem}: choose another --job-id, or continue it from its checkpoints with --resume {job_id}"
        )
    attempt = Attempt(job_id, 1, dataset_version, time.time(), nonce=secrets.token_hex(8))
    if not _create(store, keys.job_attempt(job_id, 1), attempt.to_json()):
        raise ConfigError(f"job {job_id!r}: its first attempt was claimed by another start")
    set_status(store, job_id, 1, RUNNING, created_at=attempt.started_at, workers=job.workers, spec_hash=spec_hash(job))
    return attempt


def _create(store: Channel, key: str, record: Mapping[str, object]) -> bool:
    """Write a record with a conditional put; True if this call created it (a retried write included)."""
    raw = json.dumps(record, indent=1, sort_keys=True).encode("utf-8")
    if store.put_new(key, raw):
        return True
    # A retried request whose first try did succeed finds its own record: that is ours too.
    try:
        return store.get(key) == raw
    except KeyNotFound:
        return False


def stored_job(store: Channel, job_id: str) -> JobSpec:
    """The spec a job was claimed with."""
    try:
        data = get_json(store, keys.job_spec(job_id))
    except KeyNotFound:
        raise ConfigError(f"no job {job_id!r} here") from None
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "_claim"}
    return parse_job(data, f"job {job_id}")


def read_attempt(store: Channel, job_id: str, number: int) -> Attempt:
    key = keys.job_attempt(job_id, number)
    try:
        return Attempt.from_json(get_json(store, key), key)
    except KeyNotFound:
        raise ConfigError(f"job {job_id!r} has no attempt {number}") from None


def first_version(store: Channel, job_id: str) -> str:
    """The dataset version a job was started on (every attempt trains on it)."""
    stored_job(store, job_id)  # "no job" before "no attempt"
    return read_attempt(store, job_id, 1).dataset_version


# --- resuming ---------------------------------------------------------------------


def resume_job(store: Channel, job: JobSpec, job_id: str, *, stale_after_s: float) -> Attempt:
    """Claim the next attempt of an interrupted job, continuing from the newest round every rank checkpointed.

    Refused in one line when the job does not exist, ran another job file, has finished,
    or still runs (a heartbeat or state change within ``stale_after_s``).
    """
    stored = stored_job(store, job_id)
    if spec_hash(stored) != spec_hash(job):
        changed = _changed_fields(_computed(stored), _computed(job))
        raise ConfigError(
            f"job {job_id!r} was started from a different job file ({', '.join(changed[:4])} differ); "
            "resume it with the same file, or start a new job"
        )
    if job.sync.protocol != "bsp":
        raise ConfigError(
            f"--resume continues BSP jobs; job {job_id!r} runs {job.sync.protocol}, whose updates cannot be "
            "replayed into a new attempt: start it again under a new --job-id"
        )
    record = status(store, job_id)
    previous = read_attempt(store, job_id, record.attempt)
    if record.state == SUCCEEDED:
        raise ConfigError(f"job {job_id!r} has finished; there is nothing to resume")
    ended = previous.started_at if record.updated_at is None else record.updated_at
    if record.state == RUNNING:
        ended = last_sign_of_life(store, job, previous, record)
        quiet = time.time() - ended
        if quiet < stale_after_s:
            raise ConfigError(
                f"job {job_id!r} is still running (attempt {previous.number}, heard from {quiet:.0f}s ago); "
                f"cancel it first, or wait {stale_after_s - quiet:.0f}s for it to count as interrupted"
            )
    rounds = periodic_rounds(store, job_id, previous.number, job.workers)
    common = set.intersection(*rounds) if rounds else set()
    # Nothing every rank checkpointed in the last attempt: start again where it started.
    point = ResumePoint(previous.number, max(common)) if common else previous.resume
    attempt = Attempt(
        job_id, previous.number + 1, previous.dataset_version, time.time(), point, nonce=secrets.token_hex(8),
        earlier_s=previous.earlier_s + max(0.0, ended - previous.started_at),
    )  # fmt: skip
    if not _create(store, keys.job_attempt(job_id, attempt.number), attempt.to_json()):
        raise ConfigError(f"job {job_id!r} is being resumed by someone else (attempt {attempt.number})")
    set_status(
        store, job_id, attempt.number, RUNNING,
        workers=job.workers, created_at=record.created_at, spec_hash=spec_hash(job),
    )  # fmt: skip
    return attempt


def last_sign_of_life(store: Channel, job: JobSpec, attempt: Attempt, record: JobStatus) -> float:
    """When the attempt was last heard from: its newest heartbeat, or its state's last change."""
    beats = store.get_many([keys.worker_heartbeat(attempt.job_id, attempt.number, r) for r in range(job.workers)])
    times = [attempt.started_at if record.updated_at is None else record.updated_at]
    for raw in beats.values():
        try:
            times.append(float(json.loads(raw)["at"]))
        except (KeyError, TypeError, ValueError):
            continue
    return max(times)


def _changed_fields(old: Mapping[str, object], new: Mapping[str, object], prefix: str = "") -> list[str]:
    changed: list[str] = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += _changed_fields(a, b, f"{prefix}{name}.")
        elif a != b:
            changed.append(f"{prefix}{name}")
    return changed
