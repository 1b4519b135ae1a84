"""Lambda's context object, as the worker reads it: the time its invocation has left, and its memory."""

from __future__ import annotations

from typing import Protocol

from lambdaml import settings
from lambdaml.config import JobSpec
from lambdaml.runtime.worker import Lifetime


class LambdaContext(Protocol):
    """The part of Lambda's context object the handlers read."""

    function_name: str
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int: ...


def lifetime(context: LambdaContext, job: JobSpec, *, cold: bool, started: float) -> Lifetime:
    """The run's lifetime in this invocation: Lambda's deadline, and the memory it is billed for.

    ``cold``: the invocation started a new execution environment; ``started``: when (perf_counter).
    """
    return Lifetime(
        cold=cold,
        memory_mb=int(getattr(context, "memory_limit_in_mb", 0) or 0),  # a str in Lambda's own context
        architecture=settings.stack_environment().architecture,
        started=started,
        remaining_s=lambda: context.get_remaining_time_in_millis() / 1000.0,
        margin_s=job.runtime.margin_s,
        checkpoint_every=job.runtime.checkpoint_every,
    )
