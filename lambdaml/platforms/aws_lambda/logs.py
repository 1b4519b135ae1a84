"""A job's lines from CloudWatch Logs, where Lambda writes what its functions log.

Lambda writes each invocation's lines between its own ``START RequestId: ...`` and ``END`` /
``REPORT`` lines, and a sandbox runs one invocation at a time, so within a log stream every line
from one START to the next belongs to that invocation. Which job and rank the invocation served
is in the first line the worker logs (``JOB_LOG_MARK``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lambdaml import aws_errors
from lambdaml.errors import CodecError, ConfigError
from lambdaml.platforms.aws_lambda.outputs import StackOutputs
from lambdaml.platforms.base import LogLine

#: What begins the line each worker invocation logs first: ``lambdaml job ID rank R ...``.
JOB_LOG_MARK = "lambdaml job"

_INVOCATION = re.compile(r"START RequestId: (\S+)")


@dataclass(frozen=True)
class LogEvent:
    """One event of a CloudWatch Logs stream, as ``FilterLogEvents`` lists it."""

    timestamp: int  # ms since the epoch
    message: str
    event_id: str
    ingestion_time: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> LogEvent:
        try:
            return cls(
                _whole(data["timestamp"]),
                str(data["message"]),
                str(data["eventId"]),
                _whole(data.get("ingestionTime", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(f"a CloudWatch Logs event is malformed: {exc}") from None

    def line(self, rank: int) -> LogLine:
        return LogLine(self.timestamp, rank, self.message.rstrip("\n"), self.event_id)


def _whole(value: object) -> int:
    if not isinstance(value, int | float | str):
        raise TypeError(f"a number, not {type(value).__name__}")
    return int(value)


def worker_log_groups(stack: StackOutputs) -> list[str]:
    """The CloudWatch Logs groups of the stack's worker functions, as Lambda reports them."""
    client, groups = stack.client("lambda"), []
    for function in stack.worker_functions():
        config = client.get_function_configuration(FunctionName=function)
        groups.append(config.get("LoggingConfig", {}).get("LogGroup") or f"/aws/lambda/{function}")
    return list(dict.fromkeys(groups))


def job_logs(stack: StackOutputs, job_id: str) -> list[LogLine]:
    """Every line the job's worker invocations logged, from CloudWatch Logs, by time, each with its rank."""
    from botocore.exceptions import ClientError

    logs = stack.client("logs")
    streams: dict[tuple[str, str], list[Mapping[str, object]]] = {}
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


def lines_of_job(streams: Iterable[Iterable[Mapping[str, object]]], job_id: str) -> list[LogLine]:
    """The lines of the job's invocations among log streams' events (CloudWatch's), by time, with ranks.

    Every attempt of the job is included.
    """
    mark = re.compile(rf"{re.escape(JOB_LOG_MARK)} (\S+) rank (\d+) ")
    lines: list[LogLine] = []
    for stream in streams:
        events = sorted(map(LogEvent.from_json, stream), key=lambda e: (e.timestamp, e.ingestion_time))
        lines += _lines_of_stream(events, mark, job_id)
    return sorted(lines, key=lambda line: (line.at_ms, line.rank))


def _lines_of_stream(events: list[LogEvent], mark: re.Pattern[str], job_id: str) -> list[LogLine]:
    """One stream's lines of the job: an invocation's lines so far are the rank's its mark names, or
    another job's."""
    lines: list[LogLine] = []
    invocation: list[LogEvent] = []
    rank: int | None = None
    for event in events:
        if _INVOCATION.match(event.message):
            invocation, rank = [], None
        invocation.append(event)
        found = mark.search(event.message)
        if found:
            rank = int(found.group(2)) if found.group(1) == job_id else None
            if rank is not None:
                lines += [e.line(rank) for e in invocation]
        elif rank is not None:
            lines.append(event.line(rank))
    return lines
