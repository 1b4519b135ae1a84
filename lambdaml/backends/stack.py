"""The stack backend: jobs on a deployed stack (AWS, or the local stack), through its coordinator.

A stack is known by its CloudFormation outputs. The job file keeps its algorithm and
model; where data and channels live comes from the stack (``bind``), so the same job file
runs locally and on AWS. The coordinator claims the job and starts the Lambda workers;
this side follows their heartbeats to the result rank 0 assembles.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import BotoCoreError, ClientError

from lambdaml import aws, aws_errors, catalogue, keys, settings
from lambdaml.backends.base import Backend, EventCallback, JobEvent, ProgressCallback, Run, StepEvent
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.errors import ConfigError, JobCancelled, JobFailed, LambdaMLError
from lambdaml.runtime import records
from lambdaml.runtime.events import CoordinatorEvent
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.status import JobStatus
from lambdaml.storage import get_json, open_storage

log = logging.getLogger(__name__)


def local_stacks() -> Path:
    """Where ``lambdaml local up`` records the endpoints of local stacks."""
    return settings.home() / "stacks"


@dataclass
class Stack:
    """A deployed stack's outputs and the endpoints to reach it (None: AWS itself)."""

    name: str
    outputs: dict[str, str]
    region: str = "us-east-1"
    endpoints: dict[str, str] = field(default_factory=dict)  # service -> URL, for local stacks

    def output(self, name: str) -> str:
        try:
            return self.outputs[name]
        except KeyError:
            raise ConfigError(f"stack {self.name!r} has no output {name!r}; is it a LambdaML stack?") from None

    def client(self, service: str, **kwargs: Any) -> Any:
        return aws.client(service, endpoint_url=self.endpoints.get(service), region=self.region, **kwargs)

    def environment(self) -> settings.StackEnvironment:
        """What the stack's functions know of it (on AWS, their environment), read from its outputs."""
        host, _, port = self.outputs.get("CacheEndpoint", "").partition(":")
        cache_kind = self.outputs.get("CacheKind")
        cache = catalogue.CHANNELS.get(cache_kind or "")  # the kind's description says how AWS serves it
        return settings.StackEnvironment(
            data_bucket=self.outputs.get("DataBucketName"),
            comm_bucket=self.outputs.get("CommBucketName"),
            channel_table=self.outputs.get("ChannelTableName"),
            cache_kind=cache_kind,
            cache_host=host or None,
            cache_port=int(port) if port.isdigit() else None,
            cache_tls=bool(cache and cache.stack_cache_secured) and not self.endpoints,  # on AWS, TLS only
            worker_function=self.outputs.get("WorkerFunctionName"),
            torch_worker_function=self.outputs.get("TorchWorkerFunctionName"),
            jobs_table=self.outputs.get("JobsTableName"),
        )


def record_path(name: str) -> Path:
    """Where ``lambdaml local up`` records a local stack of this name."""
    return local_stacks() / f"{keys.check_name(name, 'stack name')}.json"


def local_stack_names() -> list[str]:
    """The stacks ``lambdaml local up`` has recorded (up, or down since)."""
    return sorted(path.stem for path in local_stacks().glob("*.json"))


def local_record(name: str) -> dict[str, Any] | None:
    """What ``lambdaml local up`` recorded of a stack, or None where it recorded nothing of that name.

    A record's endpoints are all loopback and include CloudFormation's, so a local stack's name
    never reaches AWS; a record that breaks this is refused.
    """
    path = record_path(name)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"local stack {name!r}: cannot read {path}: {exc}") from None
    endpoints = record.get("endpoints") if isinstance(record, dict) else None
    if (
        not isinstance(endpoints, dict)
        or "cloudformation" not in endpoints
        or not all(isinstance(url, str) and aws.is_loopback(url) for url in endpoints.values())
    ):
        raise ConfigError(
            f"local stack {name!r}: {path} names no loopback endpoints; delete it and run lambdaml local up"
        )
    checked: dict[str, Any] = record
    return checked


def refusing_endpoint(record: dict[str, Any]) -> str | None:
    """The first of a local stack's endpoints where nothing accepts a connection: the stack is down."""
    for url in dict.fromkeys(record["endpoints"].values()):
        address = urlparse(url)
        try:
            with socket.create_connection((address.hostname or "127.0.0.1", address.port or 80), timeout=1.0):
                pass
        except OSError:
            return str(url)
    return None


def resolve_stack(name: str, *, region: str = "us-east-1") -> Stack:
    """Read a stack's outputs: a local stack's endpoints come from ``lambdaml local up``, others are AWS's."""
    record = local_record(name)
    if record is None:
        return Stack(name, _aws_outputs(name, region), region)
    down = refusing_endpoint(record)
    if down is not None:
        raise ConfigError(
            f"local stack {name!r} is down (nothing answers at {down}); start it with: lambdaml local up --name {name}"
        )
    endpoints, region = record["endpoints"], record.get("region", region)
    cloudformation = aws.client("cloudformation", endpoint_url=endpoints["cloudformation"], region=region)
    try:
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except Exception as exc:  # botocore's errors: moto lost the stack, or stopped answering
        raise ConfigError(f"cannot read local stack {name!r}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    return Stack(name, {**outputs, **record.get("outputs", {})}, region, endpoints)  # the local cache's too


def _aws_outputs(name: str, region: str) -> dict[str, str]:
    """A deployed stack's outputs; a name AWS does not know (or cannot be asked about) is one line."""
    from botocore.exceptions import ClientError

    local = f"local stacks: {', '.join(local_stack_names()) or 'none'}"
    if not aws.has_credentials():
        raise ConfigError(f"unknown stack {name!r}; {local} (and no AWS credentials to look for a deployed one)")
    try:
        stacks = aws.client("cloudformation", region=region).describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            raise ConfigError(f"unknown stack {name!r}: not deployed in {region}; {local}") from None
        raise ConfigError(f"cannot read stack {name!r}: {exc}") from None
    except Exception as exc:  # botocore's others: no way to reach AWS
        raise ConfigError(f"cannot read stack {name!r}: {exc}") from None
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


def bind(job: dict[str, Any], stack: Stack, source: str = "job") -> JobSpec:
    """A job file's content with its storage and channel pointed at the stack's resources.

    The bound job is checked as the stack's coordinator would check it (a cache of another kind
    than the job's channel, or none, is refused here), before anything is invoked.
    """
    from lambdaml.runtime.lambda_handlers import check_fits_stack

    if not isinstance(job, dict):
        return parse_job(job, source)  # reports the shape error
    data = {**job, "storage": dict(job.get("storage") or {}), "channel": dict(job.get("channel") or {"kind": "s3"})}
    s3 = stack.endpoints.get("s3")  # the data bucket's
    data["storage"].update(bucket=stack.output("DataBucketName"), endpoint_url=s3, region=stack.region)
    channel = data["channel"]
    kind = channel.get("kind", "s3")
    if isinstance(kind, str) and kind in catalogue.CHANNELS:  # an unknown kind: parse_job says so
        given = set(channel)
        channel.update({k: v for k, v in channel_from_stack(kind, stack).items() if k != "auth" or k not in given})
    bound = parse_job(data, source)
    try:
        check_fits_stack(bound, stack.environment())
    except ConfigError as exc:
        raise ConfigError(f"stack {stack.name!r}: {exc}") from None
    return bound


def channel_from_stack(kind: str, stack: Stack) -> dict[str, Any]:
    """The channel fields a stack provides for the kind, as its description says: the resources its
    outputs name; an AWS service's endpoint and region; its cache's address, where the cache serves
    that kind, with TLS and the AUTH secret where the cache on AWS has them. Empty: it provides none."""
    info, environment = catalogue.channel(kind), stack.environment()
    fields: dict[str, Any] = {f.field: stack.output(f.output) for f in info.stack_fields}
    if info.aws_service is not None:
        fields.update(endpoint_url=stack.endpoints.get(info.aws_service), region=stack.region)
    if info.stack_cache and kind == environment.cache_kind:
        fields.update(host=environment.cache_host, port=environment.cache_port)
        if environment.cache_tls:  # the template's cache on AWS has transit encryption on ...
            fields["tls"] = True
            # ... and an AUTH token in Secrets Manager, which the functions' roles may read
            if "CacheAuthSecretArn" in stack.outputs:
                fields["auth"] = {"secret_id": stack.outputs["CacheAuthSecretArn"]}
    return fields


def check_concurrency(job: JobSpec, stack: Stack) -> None:
    """Refuse a job whose workers cannot all run at once: BSP waits for every rank, and those started bill meanwhile.

    A worker function with reserved concurrency runs that many at most; one without shares
    what the account's reservations leave (Lambda's UnreservedConcurrentExecutions).
    """
    torch = catalogue.model(job.model.name).needs == "torch"
    output = "TorchWorkerFunctionName" if torch else "WorkerFunctionName"
    if output not in stack.outputs:
        return  # no such worker: the coordinator refuses the job, saying how to deploy it
    function, workers = stack.outputs[output], job.workers
    client = stack.client("lambda")
    try:
        reserved = client.get_function_concurrency(FunctionName=function).get("ReservedConcurrentExecutions")
        shared = None if reserved is not None else client.get_account_settings()["AccountLimit"]
    except ClientError as exc:
        if aws_errors.error_code(exc) in ("AccessDeniedException", "AccessDenied"):
            log.warning("cannot read the concurrency of %s (%s); not checked", function, aws_errors.error_code(exc))
            return
        raise ConfigError(f"cannot read the concurrency of {function}: {aws_errors.error_code(exc) or exc}") from None
    except BotoCoreError as exc:
        raise ConfigError(f"cannot reach Lambda for stack {stack.name!r}: {exc}") from None
    if reserved is not None and workers > reserved:
        raise ConfigError(
            f"the job needs {workers} workers at once, but {function} has a reserved concurrency of {reserved}; "
            f"lower workers, or redeploy with WorkerReservedConcurrency={workers} or more"
        )
    if shared is not None and workers > shared["UnreservedConcurrentExecutions"]:
        raise ConfigError(
            f"the job needs {workers} workers at once, but the account leaves "
            f"{shared['UnreservedConcurrentExecutions']} of its {shared['ConcurrentExecutions']} concurrent "
            "executions to functions without reserved concurrency; lower workers, or raise the account's "
            "Lambda concurrency quota"
        )


def start(job: JobSpec, stack: Stack, *, job_id: str | None = None, resume: bool = False) -> tuple[str, int]:
    """Invoke the coordinator; return the job id it started (or resumed) and the attempt number."""
    client = stack.client("lambda", read_timeout_s=900, max_attempts=1)  # a retry would start it twice
    event = CoordinatorEvent("resume" if resume else "start", job, job_id or None)
    answer = _invoke(client, stack.output("CoordinatorFunctionName"), event.to_json())
    started = JobStatus.from_json(answer, job_id or "", "the coordinator's answer")
    if started.state != records.RUNNING or not started.job_id:
        raise ConfigError(f"the coordinator refused the job: {started.error or answer}")
    return started.job_id, started.attempt


def _invoke(client: Any, function: str, event: dict[str, Any]) -> dict[str, Any]:
    response = client.invoke(
        FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode()
    )
    payload = json.loads(response["Payload"].read() or b"{}")
    if response.get("FunctionError"):
        raise JobFailed(
            f"{function} failed: {payload.get('errorType', 'error')}: {payload.get('errorMessage', payload)}"
        )
    return dict(payload)


class HeartbeatReader:
    """What a follower learns from polling a job's heartbeats: each rank's new epochs, once and in
    order (a record keeps the epochs so far, so a beat the follower missed loses none), and its steps."""

    def __init__(self) -> None:
        self.reported: dict[int, int] = {}  # rank -> the last epoch reported
        self.steps: dict[int, tuple[int, int, int]] = {}  # rank -> (epochs, steps, steps per epoch) last reported

    def read(self, heartbeats: Iterable[dict[str, Any]]) -> tuple[list[JobEvent], list[StepEvent]]:
        epochs: list[JobEvent] = []
        steps: list[StepEvent] = []
        for beat in heartbeats:
            rank = int(beat["rank"])
            for epoch, loss, elapsed in _epochs_of(beat):
                if epoch > self.reported.get(rank, 0):
                    self.reported[rank] = epoch
                    epochs.append(JobEvent(rank, epoch, loss, elapsed))
            at = (int(beat["epoch"]), int(beat.get("step") or 0), int(beat.get("steps") or 0))
            if at[2] and at != self.steps.get(rank):
                self.steps[rank] = at
                steps.append(StepEvent(rank, *at))
        return sorted(epochs, key=lambda e: (e.epoch, e.rank)), steps


def _epochs_of(beat: dict[str, Any]) -> list[tuple[int, float, float]]:
    """A record's epochs so far; one written before records kept them has its latest epoch alone."""
    if "epochs" in beat:
        return [(int(e), float(loss), float(elapsed)) for e, loss, elapsed in beat["epochs"]]
    return [(int(beat["epoch"]), float(beat["loss"]), float(beat["elapsed_s"]))] if beat.get("epoch") else []


def watch(
    job: JobSpec,
    job_id: str,
    attempt: int,
    stack: Stack,
    *,
    on_event: EventCallback | None = None,
    on_progress: ProgressCallback | None = None,
    poll_s: float = 0.5,
) -> JobResult:
    """Follow an attempt's heartbeats until the job ends; return its result record.

    Each rank's epochs are reported as ``JobEvent``s, every one once and in order, and its steps
    within an epoch as ``StepEvent``s, as local workers report theirs.

    Bounded: if neither the status nor any heartbeat changes for the job's sync timeout
    plus a minute, the job is declared stuck. A later attempt of the job ends this one.
    """
    store = open_storage(job.storage)
    beats = [keys.worker_heartbeat(job_id, attempt, r) for r in range(job.workers)]
    last_change, last_seen = time.monotonic(), None
    limit = job.sync.timeout_s + 60
    reader = HeartbeatReader()
    while True:
        status = status_of(store, job_id)
        if status.attempt != attempt:
            raise JobFailed(f"job {job_id} attempt {attempt} was superseded by attempt {status.attempt}")
        heartbeats = [json.loads(v) for v in store.get_many(beats).values()]
        seen = (status.state, status.updated_at, sorted((h["rank"], h.get("at")) for h in heartbeats))
        if seen != last_seen:
            last_seen, last_change = seen, time.monotonic()
        epochs, steps = reader.read(heartbeats)
        for event in epochs:
            if on_event is not None:
                on_event(event)
        for step in steps:
            if on_progress is not None:
                on_progress(step)
        if status.state == records.SUCCEEDED:
            key = keys.job_result(job_id)
            return JobResult.from_json(get_json(store, key), key)
        _raise_if_ended_badly(status)
        if time.monotonic() - last_change > limit:
            raise JobFailed(f"job {job_id} made no progress for {limit:g}s (last state: {status.state})")
        time.sleep(poll_s)


def _raise_if_ended_badly(status: JobStatus) -> None:
    """JobCancelled for a cancelled job, JobFailed for a failed one; nothing for any other state."""
    if status.state == records.CANCELLED:
        raise JobCancelled(f"job {status.job_id} was cancelled")
    if status.state == records.FAILED:
        raise JobFailed(f"job {status.job_id} failed: {status.error or 'no detail'}")


def status_of(store: Channel, job_id: str) -> JobStatus:
    status = records.status(store, job_id)
    if not status.known:
        raise ConfigError(f"no job {job_id!r} in this stack")
    return status


def job_of(store: Channel, job_id: str) -> JobSpec:
    return records.stored_job(store, job_id)


def cancel(job_id: str, stack: Stack) -> JobStatus:
    """Ask the coordinator to cancel; workers stop at their next heartbeat. The job's record after
    (state "rejected", with the error, where the coordinator refused)."""
    event = CoordinatorEvent("cancel", job_of(stack_store(stack), job_id), job_id)
    answer = _invoke(stack.client("lambda"), stack.output("CoordinatorFunctionName"), event.to_json())
    return JobStatus.from_json(answer, job_id, "the coordinator's answer")


@dataclass(frozen=True)
class LogLine:
    """One line a job's worker logged: when (ms since the epoch), which rank, and the line."""

    at_ms: int
    rank: int
    message: str
    event_id: str


_INVOCATION = re.compile(r"START RequestId: (\S+)")


def _line(event: dict[str, Any], rank: int) -> LogLine:
    return LogLine(int(event["timestamp"]), rank, event["message"].rstrip("\n"), str(event["eventId"]))


def worker_log_groups(stack: Stack) -> list[str]:
    """The CloudWatch Logs groups of the stack's worker functions, as Lambda reports them."""
    client, groups = stack.client("lambda"), []
    for output in ("WorkerFunctionName", "TorchWorkerFunctionName"):
        if output in stack.outputs:
            config = client.get_function_configuration(FunctionName=stack.outputs[output])
            groups.append(config.get("LoggingConfig", {}).get("LogGroup") or f"/aws/lambda/{stack.outputs[output]}")
    return list(dict.fromkeys(groups))


def job_logs(stack: Stack, job_id: str) -> list[LogLine]:
    """Every line the job's worker invocations logged, from CloudWatch Logs, by time, each with its rank."""
    logs = stack.client("logs")
    streams: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for group in worker_log_groups(stack):
        try:
            for page in logs.get_paginator("filter_log_events").paginate(logGroupName=group):
                for event in page["events"]:
                    streams.setdefault((group, event["logStreamName"]), []).append(event)
        except ClientError as exc:
            if aws_errors.error_code(exc) == "ResourceNotFoundException":
                continue  # no worker has logged yet
            raise ConfigError(f"cannot read the logs of {group}: {aws_errors.error_code(exc) or exc}") from None
    return lines_of_job(streams.values(), job_id)


def lines_of_job(streams: Iterable[list[dict[str, Any]]], job_id: str) -> list[LogLine]:
    """The lines of the job's invocations among log streams' events (CloudWatch's), by time, with ranks.

    A sandbox runs one invocation at a time, so within a log stream every line from a START
    to the next belongs to that invocation; the invocation's job and rank come from the line
    each worker logs first (``JOB_LOG_MARK``). Every attempt of the job is included.
    """
    from lambdaml.runtime.lambda_handlers import JOB_LOG_MARK

    mark = re.compile(rf"{re.escape(JOB_LOG_MARK)} (\S+) rank (\d+) ")
    lines: list[LogLine] = []
    for events in streams:
        invocation: list[dict[str, Any]] = []
        rank: int | None = None
        for event in sorted(events, key=lambda e: (e["timestamp"], e.get("ingestionTime", 0))):
            if _INVOCATION.match(event["message"]):
                invocation, rank = [], None
            invocation.append(event)
            found = mark.search(event["message"])
            if found:  # the invocation's lines so far are this rank's, or another job's
                rank = int(found.group(2)) if found.group(1) == job_id else None
                if rank is not None:
                    lines += [_line(e, rank) for e in invocation]
            elif rank is not None:
                lines.append(_line(event, rank))
    return sorted(lines, key=lambda line: (line.at_ms, line.rank))


def stack_store(stack: Stack) -> Channel:
    """The stack's data bucket."""
    bucket, endpoint = stack.output("DataBucketName"), stack.endpoints.get("s3")
    return open_storage(StorageSpec(bucket=bucket, endpoint_url=endpoint, region=stack.region))


class StackBackend(Backend):
    """Lambda workers in a deployed stack; the job must be bound to the stack (``bind``)."""

    name = "lambda"

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def store(self) -> Channel:
        return stack_store(self.stack)

    def launch(self, job: JobSpec, *, job_id: str | None = None, resume: bool = False) -> Run:
        check_concurrency(job, self.stack)
        started_id, number = start(job, self.stack, job_id=job_id, resume=resume)
        return Run(job, records.read_attempt(self.store(), started_id, number))

    def attach(self, job_id: str) -> Run:
        """The run of a job started earlier (``train --detach``): its stored spec and current attempt."""
        store = self.store()
        number = status_of(store, job_id).attempt
        return Run(job_of(store, job_id), records.read_attempt(store, job_id, number))

    def wait(
        self, run: Run, *, on_event: EventCallback | None = None, on_progress: ProgressCallback | None = None
    ) -> JobResult:
        return watch(
            run.job, run.attempt.job_id, run.attempt.number, self.stack, on_event=on_event, on_progress=on_progress
        )

    def cancel(self, job_id: str) -> JobStatus:
        """Through the coordinator, as a user without write access to the bucket would."""
        return cancel(job_id, self.stack)


__all__ = [
    "LambdaMLError",
    "Stack",
    "StackBackend",
    "bind",
    "cancel",
    "check_concurrency",
    "resolve_stack",
    "stack_store",
    "start",
    "status_of",
    "watch",
]
