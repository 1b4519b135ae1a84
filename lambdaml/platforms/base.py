"""The platform interface: what the stack backend asks of a deployed stack, whatever cloud it runs on.

A stack is the functions that run a job (a coordinator that claims it and starts its workers,
the workers themselves) and the resources they share: the data bucket that holds datasets and
every job record, and the channels' stores. The backend binds a job to the stack's resources,
asks its coordinator to start or cancel the job, and follows the records its workers write to
the data bucket; only these methods differ from one cloud to another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from lambdaml.config import JobSpec, StorageSpec
from lambdaml.runtime.events import CoordinatorEvent
from lambdaml.runtime.status import JobStatus
from lambdaml.settings import StackEnvironment


@dataclass(frozen=True)
class LogLine:
    """One line a job's worker logged: when (ms since the epoch), which rank, and the line."""

    at_ms: int
    rank: int
    message: str
    event_id: str  # the platform's id of the line: a follower shows each once


class DeployedStack(ABC):
    """A deployed stack, as the stack backend sees it."""

    name: str
    region: str

    @abstractmethod
    def environment(self) -> StackEnvironment:
        """What the stack's functions know of it: its resources' names and its cache's address."""

    @abstractmethod
    def data_storage(self) -> StorageSpec:
        """The data bucket: datasets, job records, checkpoints, results."""

    @abstractmethod
    def channel_fields(self, kind: str) -> dict[str, object]:
        """The fields of a job file's channel of this kind that the stack provides (its resources,
        endpoints, cache); empty where it provides none."""

    @abstractmethod
    def check_capacity(self, job: JobSpec) -> None:
        """Refuse, as a ConfigError, a job whose workers cannot all run at once on this stack."""

    @abstractmethod
    def coordinate(self, event: CoordinatorEvent) -> JobStatus:
        """Ask the stack's coordinator (start, resume, cancel, status) and return its answer: the job's
        state record, or one whose state is "rejected" with the error. A start is asked once, never
        retried, since a retry could start the job twice."""

    @abstractmethod
    def job_logs(self, job_id: str) -> list[LogLine]:
        """Every line the job's worker invocations logged, by time, each with its rank."""
