"""The Backend interface: run W workers of a job and return their reports."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lambdaml.config import JobSpec


@dataclass(frozen=True)
class JobEvent:
    """Progress from a worker: an epoch finished."""

    rank: int
    epoch: int
    loss: float
    elapsed_s: float


EventCallback = Callable[[JobEvent], None]


class Backend(ABC):
    @abstractmethod
    def run(self, job: JobSpec, job_id: str, *, on_event: EventCallback | None = None) -> list[dict[str, Any]]:
        """Run every rank to completion; return the reports in rank order or raise JobFailed."""
