"""The events a stack's functions receive from this side and from each other, typed: parsed once at the
handler, written from the type.

Two kinds: the coordinator's (start, resume, cancel or report on a job) and a worker's (train one
rank of one attempt). Their JSON is the wire format between the client, the coordinator and the
workers; a malformed one is one ConfigError. What the platform itself sends (Lambda's record of a
worker it gave up on) is the platform package's (``lambdaml.platforms.aws_lambda.failures``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lambdaml import keys
from lambdaml.config import JobSpec, parse_job
from lambdaml.errors import ConfigError

STARTS = ("start", "resume")
ACTIONS = (*STARTS, "cancel", "status")


@dataclass(frozen=True)
class CoordinatorEvent:
    """What the coordinator is asked: ``{"action", "job", "job_id"?, "worker_function"?}``.

    ``start`` and ``resume`` may leave out the job id (a new job is named for it; a resume is
    refused without one) and may name the worker function; ``cancel`` and ``status`` need both
    the job and its id.
    """

    action: str
    job: JobSpec
    job_id: str | None = None
    worker_function: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> CoordinatorEvent:
        if not isinstance(data, dict):
            raise ConfigError(f"a coordinator event is a JSON object, not {type(data).__name__}")
        action = data.get("action", "start")
        if action in STARTS:
            job_id = data.get("job_id")
            return cls(
                action,
                parse_job(data.get("job"), "job"),
                None if job_id in (None, "") else keys.check_name(job_id, "job id"),
                _text(data, "worker_function") or None,
            )
        job = parse_job(data["job"], "job") if "job" in data else None
        if job is None or "job_id" not in data:
            raise ConfigError(f"'{action}' needs 'job' and 'job_id'")
        if action not in ACTIONS:
            raise ConfigError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
        return cls(action, job, keys.check_name(data["job_id"], "job id"))

    def to_json(self) -> dict[str, Any]:
        event: dict[str, Any] = {"action": self.action, "job": self.job.model_dump(mode="json")}
        if self.job_id:
            event["job_id"] = self.job_id
        if self.worker_function:
            event["worker_function"] = self.worker_function
        return event


@dataclass(frozen=True)
class WorkerEvent:
    """One invocation of a worker: rank ``rank`` of attempt ``attempt`` of job ``job_id``, its ``invocation``-th.

    It names the function to continue in, and carries the job's MAC key (``seal_key``, hex) where
    the channel asks for one: no store ever holds it.
    """

    job: JobSpec
    job_id: str
    attempt: int
    rank: int
    invocation: int = 1
    worker_function: str | None = None
    secret: bytes | None = None

    @classmethod
    def from_json(cls, data: Any, what: str = "worker event") -> WorkerEvent:
        if not isinstance(data, dict):
            raise ConfigError(f"a {what} is a JSON object, not {type(data).__name__}")
        job = parse_job(data.get("job"), "job")
        try:
            seal_key = _text(data, "seal_key")
            return cls(
                job=job,
                job_id=keys.check_name(data["job_id"], "job id"),
                attempt=int(data.get("attempt", 1)),
                rank=int(data["rank"]),
                invocation=int(data.get("invocation", 1)),
                worker_function=_text(data, "worker_function") or None,
                secret=bytes.fromhex(seal_key) if seal_key else None,
            )
        except KeyError as exc:
            raise ConfigError(f"{what} is malformed: no {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{what} is malformed: {' '.join(str(exc).split())}") from None

    def next_invocation(self) -> WorkerEvent:
        """The same rank's next invocation: a continuation, or a resume after the platform gave up on it."""
        return replace(self, invocation=self.invocation + 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job.model_dump(mode="json"),
            "job_id": self.job_id,
            "attempt": self.attempt,
            "rank": self.rank,
            "invocation": self.invocation,
            "worker_function": self.worker_function,
            "seal_key": self.secret.hex() if self.secret is not None else None,
        }


def _text(data: Mapping[str, object], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"'{name}' is text, not {type(value).__name__}")
    return value
