"""The Backend interface: run W workers of a job and return their reports."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lambdaml.config import JobSpec
from lambdaml.cost import job_cost
from lambdaml.runtime.records import Attempt


@dataclass(frozen=True)
class JobEvent:
    """Progress from a worker: an epoch finished."""

    rank: int
    epoch: int
    loss: float
    elapsed_s: float


EventCallback = Callable[[JobEvent], None]


class Backend(ABC):
    """Where the workers of a job run; how they synchronize follows from it."""

    #: Whether the workers synchronize through the job's channel (IaaS workers use gloo).
    uses_channel: bool = True

    @abstractmethod
    def run(
        self, job: JobSpec, attempt: Attempt, *, secret: bytes | None = None, on_event: EventCallback | None = None
    ) -> list[dict[str, Any]]:
        """Run every rank of ``attempt`` to completion; return the reports in rank order or raise JobFailed.

        ``secret`` authenticates the channel's values (handed to the workers, never stored).
        """

    def cost(self, job: JobSpec, workers: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
        """What the run cost: Lambda GB-seconds and channel requests, unless the backend bills otherwise."""
        return job_cost(job.channel.kind, workers, wall_s, job.storage.region)
