"""A job's state record (``jobs/ID/status.json``), typed: parsed once where it is read, written from the type.

The record holds the job's state and current attempt, when it started and last changed, and
what its ending left (its result and model, its cost, why it failed). It is written whole by
``records.set_status``; a field set to null stays null, and a field this version does not name
is kept as it was, so a record reads and writes back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from lambdaml.errors import CodecError

RUNNING, SUCCEEDED, FAILED, CANCELLED, INTERRUPTED = "running", "succeeded", "failed", "cancelled", "interrupted"
ENDED = (SUCCEEDED, FAILED, CANCELLED, INTERRUPTED)
#: The state of a job with no record: none was claimed, or its record is gone.
UNKNOWN = "unknown"


def ending_stands(recorded: str, state: str) -> bool:
    """Whether an attempt's recorded state stays when ``state`` comes for the same attempt: its first
    ending does (a cancel's stragglers, a late duplicate), except that a cancel overrides a failure."""
    return recorded == SUCCEEDED or (recorded in ENDED and state != CANCELLED)


class JobStatus(BaseModel):
    """The job's state record; ``unknown(job_id)`` where it has none."""

    # Extra fields are kept, so a record written by another version survives a rewrite.
    model_config = ConfigDict(frozen=True, extra="allow")

    job_id: str
    state: str
    attempt: int = 1  # the record of a job before its first attempt (unknown) names none
    created_at: float | None = None
    updated_at: float | None = None
    workers: int | None = None
    spec_hash: str | None = None
    finished_at: float | None = None
    result_key: str | None = None
    model_uri: str | None = None
    cost_dollars: float | None = None
    # The cost of a job that ended without a result: estimated from its workers' run time.
    cost_estimated: bool | None = None
    error: str | None = None
    reason: str | None = None  # a failure's kind where it has one: "diverged"

    @classmethod
    def unknown(cls, job_id: str) -> JobStatus:
        return cls(job_id=job_id, state=UNKNOWN)

    @classmethod
    def from_json(cls, data: Any, job_id: str, what: str = "state record") -> JobStatus:
        """From a record's JSON (one written without its job id takes ``job_id``); a CodecError if malformed."""
        if not isinstance(data, dict):
            raise CodecError(f"{what} of job {job_id} is malformed: a JSON object, not {type(data).__name__}")
        try:
            return cls.model_validate({"job_id": job_id, **data})
        except ValidationError as exc:
            raise CodecError(f"{what} of job {job_id} is malformed: {_problems(exc)}") from None

    @property
    def known(self) -> bool:
        """Whether the job has a record."""
        return self.state != UNKNOWN

    def changed(self, attempt: int, state: str, fields: Mapping[str, object], now: float) -> JobStatus:
        """The record with ``state`` of ``attempt`` recorded at ``now``, with ``fields``.

        A later attempt starts a fresh record that keeps only when the job began.
        """
        if self.known and attempt <= self.attempt:
            base = self.to_json()
        else:
            began = self.created_at if "created_at" in self.model_fields_set else now
            base = {"job_id": self.job_id, "created_at": began}
        return self.from_json({**base, **fields, "state": state, "attempt": attempt, "updated_at": now}, self.job_id)

    def with_state(self, state: str) -> JobStatus:
        return self.model_copy(update={"state": state})

    def to_json(self) -> dict[str, Any]:
        """The record as stored: the fields it was given, no others."""
        return self.model_dump(mode="json", exclude_unset=True)

    # Read by name, the record is its stored JSON: ``record["state"]``, ``"error" in record``.
    def __getitem__(self, name: str) -> object:
        return self.to_json()[name]

    def __contains__(self, name: object) -> bool:
        return name in self.model_fields_set or name in (self.model_extra or {})


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors())
