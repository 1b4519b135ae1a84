"""The stack backend: jobs on a deployed stack (AWS, or the local stack), driven through the
platform interface (``lambdaml.platforms.base.DeployedStack``).

The job file keeps its algorithm and model; where data and channels live comes from the stack
(``bind``), so the same job file runs locally and on AWS. The stack's coordinator claims the job
and starts its workers; this side follows their heartbeats to the result rank 0 assembles
(``stack_watch``).
"""

from __future__ import annotations

from typing import Any

from lambdaml import catalogue
from lambdaml.backends.base import Backend, EventCallback, ProgressCallback, Run
from lambdaml.backends.stack_watch import job_of, status_of, watch
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, parse_job
from lambdaml.errors import ConfigError
from lambdaml.platforms.aws_lambda import find
from lambdaml.platforms.aws_lambda.stack import LambdaStack
from lambdaml.platforms.base import DeployedStack
from lambdaml.platforms.fit import check_fits_stack
from lambdaml.runtime import records
from lambdaml.runtime.events import CoordinatorEvent
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.status import JobStatus
from lambdaml.storage import open_storage


def resolve_stack(name: str, *, region: str = "us-east-1") -> LambdaStack:
    """The stack of this name: one ``lambdaml local up`` recorded, or one deployed on AWS. Lambda is
    the one platform built; a stack of another would be looked for here."""
    return find.resolve_stack(name, region=region)


def bind(job: dict[str, Any], stack: DeployedStack, source: str = "job") -> JobSpec:
    """A job file's content with its storage and channel pointed at the stack's resources.

    The bound job is checked as the stack's coordinator would check it (a cache of another kind
    than the job's channel, or none, is refused here), before anything is invoked.
    """
    if not isinstance(job, dict):
        return parse_job(job, source)  # reports the shape error
    data = {**job, "storage": dict(job.get("storage") or {}), "channel": dict(job.get("channel") or {"kind": "s3"})}
    storage = stack.data_storage()
    data["storage"].update(bucket=storage.bucket, endpoint_url=storage.endpoint_url, region=storage.region)
    _fill_channel(data["channel"], stack)
    bound = parse_job(data, source)
    try:
        check_fits_stack(bound, stack.environment())
    except ConfigError as exc:
        raise ConfigError(f"stack {stack.name!r}: {exc}") from None
    return bound


def _fill_channel(channel: dict[str, Any], stack: DeployedStack) -> None:
    """Point ``channel`` at the stack's resources of its kind, and a channel nested in it (the store a
    direct channel meets through) at those of its own."""
    kind = channel.get("kind", "s3")
    if isinstance(kind, str) and kind in catalogue.CHANNELS:  # an unknown kind: parse_job says so
        given = set(channel)
        channel.update({k: v for k, v in stack.channel_fields(kind).items() if k != "auth" or k not in given})
    for name, nested in list(channel.items()):
        if isinstance(nested, dict) and "kind" in nested:
            channel[name] = dict(nested)
            _fill_channel(channel[name], stack)


def stack_store(stack: DeployedStack) -> Channel:
    """The stack's data bucket."""
    return open_storage(stack.data_storage())


class StackBackend(Backend):
    """A deployed stack's workers; the job must be bound to the stack (``bind``)."""

    name = "lambda"  # the platform its jobs are billed as: Lambda, the one built

    def __init__(self, stack: DeployedStack) -> None:
        self.stack = stack

    def store(self) -> Channel:
        return stack_store(self.stack)

    def launch(self, job: JobSpec, *, job_id: str | None = None, resume: bool = False) -> Run:
        """Ask the stack's coordinator to start the job (or its next attempt), once its workers can all run."""
        self.stack.check_capacity(job)
        started = self.stack.coordinate(CoordinatorEvent("resume" if resume else "start", job, job_id or None))
        if started.state != records.RUNNING or not started.job_id:
            raise ConfigError(f"the coordinator refused the job: {started.error or started.to_json()}")
        return Run(job, records.read_attempt(self.store(), started.job_id, started.attempt))

    def attach(self, job_id: str) -> Run:
        """The run of a job started earlier (``train --detach``): its stored spec and current attempt."""
        store = self.store()
        number = status_of(store, job_id).attempt
        return Run(job_of(store, job_id), records.read_attempt(store, job_id, number))

    def wait(
        self, run: Run, *, on_event: EventCallback | None = None, on_progress: ProgressCallback | None = None
    ) -> JobResult:
        attempt = run.attempt
        return watch(run.job, attempt.job_id, attempt.number, on_event=on_event, on_progress=on_progress)

    def cancel(self, job_id: str) -> JobStatus:
        """Through the coordinator, as a user without write access to the bucket would. The job's
        record after (state "rejected", with the error, where the coordinator refused)."""
        return self.stack.coordinate(CoordinatorEvent("cancel", job_of(self.store(), job_id), job_id))


__all__ = ["StackBackend", "bind", "resolve_stack", "stack_store"]
