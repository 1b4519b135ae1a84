"""The job registry: one record per job, whatever ran it.

A record holds the job's id, the hash of its spec, its state and attempts, when it started
and ended, where its result and model are, and (once finished) its cost. Without a stack,
the records are the jobs' state records under ``jobs/`` in the data bucket. A stack keeps the
same records in its ``JobsTable`` (DynamoDB), written as the job's state changes, so its jobs
are listed by one paginated scan instead of a read per job. Both are read page by page.

The bucket's records are the truth: the table is written after them and may miss a write
(a throttle past its retries, a permission), so a job the table holds as running is
confirmed against the bucket before it is listed so.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, TypedDict

from botocore.exceptions import BotoCoreError, ClientError

from lambdaml import keys
from lambdaml.aws_errors import translate_botocore
from lambdaml.channels import Channel
from lambdaml.errors import CodecError
from lambdaml.runtime.status import RUNNING, JobStatus

log = logging.getLogger(__name__)

#: The sort key of a job's record in the JobsTable (its hash key is the job id).
RECORD_ITEM = "record"


@dataclass(frozen=True)
class JobRecord:
    """A job as ``lambdaml jobs`` lists it; its fields are named as in the job's state record."""

    job_id: str
    state: str
    attempt: int
    created_at: float
    updated_at: float
    finished_at: float | None = None
    spec_hash: str | None = None
    workers: int | None = None
    result_key: str | None = None
    model_uri: str | None = None
    cost_dollars: float | None = None
    # The cost of a job that ended without a result: estimated from its workers' run time.
    cost_estimated: bool = False
    error: str | None = None

    @classmethod
    def from_status(cls, job_id: str, record: object) -> JobRecord:
        """From a state record (a JobStatus), or the JSON of one (a JobsTable item, a machine's record file).

        A malformed one is a CodecError saying what is wrong (``no 'state'``).
        """
        if isinstance(record, JobStatus):
            return cls._of(record)
        try:
            return cls._from_json(job_id, record)
        except (KeyError, TypeError, ValueError) as exc:
            raise CodecError(malformed(exc)) from None

    @classmethod
    def _of(cls, status: JobStatus) -> JobRecord:
        if status.updated_at is None:
            raise CodecError("no 'updated_at'")
        return cls(
            job_id=status.job_id,
            state=status.state,
            attempt=status.attempt,
            created_at=status.created_at or status.updated_at,
            updated_at=status.updated_at,
            finished_at=status.finished_at,
            spec_hash=status.spec_hash,
            workers=status.workers,
            result_key=status.result_key,
            model_uri=status.model_uri,
            cost_dollars=status.cost_dollars,
            cost_estimated=bool(status.cost_estimated),
            error=status.error,
        )

    @classmethod
    def _from_json(cls, job_id: str, record: object) -> JobRecord:
        if not isinstance(record, dict):
            raise TypeError(f"a JSON object, not {type(record).__name__}")
        updated = float(record["updated_at"])

        def optional(name: str, kind: type) -> Any:
            value = record.get(name)
            return None if value is None else kind(value)

        return cls(
            job_id=job_id,
            state=str(record["state"]),
            attempt=int(record.get("attempt", 1)),
            created_at=float(record.get("created_at") or updated),
            updated_at=updated,
            finished_at=optional("finished_at", float),
            spec_hash=optional("spec_hash", str),
            workers=optional("workers", int),
            result_key=optional("result_key", str),
            model_uri=optional("model_uri", str),
            cost_dollars=optional("cost_dollars", float),
            cost_estimated=str(record.get("cost_estimated")).lower() == "true",  # a table's item keeps it as text
            error=optional("error", str),
        )

    @property
    def ended_at(self) -> float | None:
        """When it ended: its finish, or its last state change once that is not ``running``."""
        if self.state == RUNNING:
            return None
        return self.finished_at or self.updated_at

    def summary(self, now: float) -> JobSummary:
        """The record with when it ended and its duration so far: what ``jobs --output json`` prints."""
        ended = self.ended_at
        return {
            "job_id": self.job_id,
            "state": self.state,
            "attempt": self.attempt,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "spec_hash": self.spec_hash,
            "workers": self.workers,
            "result_key": self.result_key,
            "model_uri": self.model_uri,
            "cost_dollars": self.cost_dollars,
            "cost_estimated": self.cost_estimated,
            "error": self.error,
            "ended_at": ended,
            "duration_s": max(0.0, (now if ended is None else ended) - self.created_at),
        }


class JobSummary(TypedDict):
    """A job as ``jobs --output json`` prints it: its record's fields, when it ended and how long it ran."""

    job_id: str
    state: str
    attempt: int
    created_at: float
    updated_at: float
    finished_at: float | None
    spec_hash: str | None
    workers: int | None
    result_key: str | None
    model_uri: str | None
    cost_dollars: float | None
    cost_estimated: bool
    error: str | None
    ended_at: float | None
    duration_s: float


class JobRegistry(ABC):
    """Where job records are kept: ``save`` one, read them all a page at a time."""

    @abstractmethod
    def save(self, record: JobRecord) -> None:
        """Write a job's record, unless one of a later attempt, or a later write, is there already."""

    @abstractmethod
    def pages(self) -> Iterator[list[JobRecord]]:
        """Every record, a page at a time, in no particular order; a malformed one is left out."""

    def newest_first(self, state: str | None = None) -> list[JobRecord]:
        found = [r for page in self.pages() for r in page if state is None or r.state == state]
        return sorted(found, key=lambda r: (r.created_at, r.job_id), reverse=True)


class BucketRegistry(JobRegistry):
    """The records as the jobs' state records in a data bucket, which ``records.set_status`` writes."""

    def __init__(self, store: Channel, page_size: int = 200) -> None:
        self.store, self.page_size = store, page_size

    def save(self, record: JobRecord) -> None:
        """Nothing to add: the state record written just before is this registry's record."""

    def pages(self) -> Iterator[list[JobRecord]]:
        ids = [job_id for job_id in map(keys.job_of_status, self.store.list(keys.JOBS_PREFIX)) if job_id]
        for start in range(0, len(ids), self.page_size):
            yield read_records(self.store, ids[start : start + self.page_size])


def read_records(store: Channel, job_ids: list[str]) -> list[JobRecord]:
    """The state records of these jobs in a bucket, read concurrently; one that is gone or malformed is left out."""
    raw = store.get_many([keys.job_status(job_id) for job_id in job_ids])
    records = []
    for job_id in job_ids:
        try:
            records.append(JobRecord.from_status(job_id, json.loads(raw[keys.job_status(job_id)])))
        except (KeyError, ValueError, CodecError):
            continue  # removed since the listing (no key), not JSON, or not a record of ours
    return records


class TableRegistry(JobRegistry):
    """The records as items of a stack's JobsTable: ``{job_id, item: "record", ...}``."""

    SERVICE = "dynamodb"  # the AWS service its table is in: its client's

    def __init__(self, client: Any, table: str, *, bucket: Channel | None = None, page_size: int = 100) -> None:
        self.client, self.table, self.page_size = client, table, page_size
        self.bucket = bucket  # where the records that are the truth are, to confirm running jobs by

    def save(self, record: JobRecord) -> None:
        fields = {k: v for k, v in asdict(record).items() if v is not None}
        item = {name: _attribute(value) for name, value in {**fields, "item": RECORD_ITEM}.items()}
        try:
            self.client.put_item(
                TableName=self.table,
                Item=item,
                # Writes of one job can race (a cancel and a worker's failure): an older attempt's
                # or an older write's record never replaces a newer one.
                ConditionExpression="attribute_not_exists(job_id) OR attempt < :a OR "
                "(attempt = :a AND updated_at <= :u)",
                ExpressionAttributeValues={":a": item["attempt"], ":u": item["updated_at"]},
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            log.debug("job %s: a newer record is in %s", record.job_id, self.table)
        except (BotoCoreError, ClientError, ConnectionError) as exc:  # the bucket holds the truth; the job goes on
            endpoint = self.client.meta.endpoint_url
            error = translate_botocore(exc, service=self.SERVICE, endpoint=endpoint, what="put_item")
            log.error(
                "job %s: its state %r is in the bucket but not in %s (%s); lambdaml status reads the bucket",
                record.job_id, record.state, self.table, error,
            )  # fmt: skip

    def pages(self) -> Iterator[list[JobRecord]]:
        start: dict[str, dict[str, str]] | None = None  # the last key a page read: {"job_id": {"S": ...}, ...}
        while True:
            answer = self.client.scan(
                TableName=self.table,
                Limit=self.page_size,
                FilterExpression="#item = :record",
                ExpressionAttributeNames={"#item": "item"},
                ExpressionAttributeValues={":record": {"S": RECORD_ITEM}},
                **({"ExclusiveStartKey": start} if start else {}),
            )
            records = []
            for item in answer.get("Items", []):
                try:
                    records.append(_record_of(item))
                except CodecError:
                    continue
            yield self._confirmed(records)
            start = answer.get("LastEvaluatedKey")
            if not start:
                return

    def _confirmed(self, records: list[JobRecord]) -> list[JobRecord]:
        """The page with every job it holds as running replaced by the bucket's record of it."""
        running = [r.job_id for r in records if r.state == RUNNING]
        if self.bucket is None or not running:
            return records
        truth = {r.job_id: r for r in read_records(self.bucket, running)}
        return [truth.get(r.job_id, r) for r in records]


def _record_of(item: Any) -> JobRecord:
    """A JobsTable item's record; a CodecError if it is not one."""
    try:
        values = {str(name): _value(attribute) for name, attribute in item.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise CodecError(malformed(exc)) from None
    if "job_id" not in values:
        raise CodecError("no 'job_id'")
    return JobRecord.from_status(str(values["job_id"]), values)


def _attribute(value: object) -> dict[str, str]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return {"S": str(value)}
    return {"N": str(Decimal(repr(value)))}


def _value(attribute: Any) -> float | str:
    if "N" in attribute:
        return float(attribute["N"])
    if "S" in attribute:
        return str(attribute["S"])
    raise ValueError(f"unexpected attribute {sorted(attribute)}")


def malformed(exc: BaseException) -> str:
    """What is wrong with a record, in one line, from the error reading it raised."""
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r}"
    return " ".join(str(exc).split()) or type(exc).__name__
