"""The job registry on moto: a stack's JobsTable holds the same records as the data bucket, read page by page."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from lambdaml import aws, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.runtime import records
from lambdaml.runtime.registry import BucketRegistry, JobRecord, TableRegistry
from lambdaml.storage import get_json


@pytest.fixture
def table(moto_url: str) -> Iterator[TableRegistry]:
    """A table with the JobsTable's keys (template.yaml), read two records a page."""
    client = aws.client("dynamodb", endpoint_url=moto_url)
    name = f"jobs-{secrets.token_hex(4)}"
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in ("job_id", "item")],
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}, {"AttributeName": "item", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield TableRegistry(client, name, page_size=2)
    client.delete_table(TableName=name)


def record(job_id: str, **fields: Any) -> JobRecord:
    return JobRecord(
        **{"job_id": job_id, "state": "running", "attempt": 1, "created_at": 100.0, "updated_at": 100.0, **fields}
    )


def test_every_record_comes_back_newest_first_across_pages(table: TableRegistry) -> None:
    saved = [record(f"job-{i}", created_at=100.0 + i, updated_at=100.0 + i) for i in range(5)]
    for one in saved:
        table.save(one)
    assert sum(1 for _ in table.pages()) >= 3  # five records, two a page
    assert table.newest_first() == list(reversed(saved))
    assert table.newest_first("failed") == []


def test_an_older_write_never_replaces_a_newer_record(table: TableRegistry) -> None:
    newer = record("raced", state="succeeded", attempt=2, updated_at=300.0, finished_at=300.0, cost_dollars=0.0125)
    table.save(newer)
    table.save(record("raced", state="failed", attempt=1, updated_at=400.0, error="worker 1: late"))  # older attempt
    table.save(record("raced", state="cancelled", attempt=2, updated_at=200.0))  # older write of the same attempt
    assert table.newest_first() == [newer]


@pytest.fixture
def recording_in(table: TableRegistry) -> Iterator[TableRegistry]:
    records.also_record_in(table)
    yield table
    records._registries.clear()


def test_each_state_a_job_records_is_in_the_table_as_in_the_bucket(
    recording_in: TableRegistry, data_store: tuple[StorageSpec, Channel]
) -> None:
    _, store = data_store
    job_id = f"reg-{secrets.token_hex(3)}"
    bucket = BucketRegistry(store)
    for attempt, state in ((1, records.RUNNING), (1, records.FAILED), (2, records.RUNNING), (2, records.CANCELLED)):
        records.set_status(store, job_id, attempt, state, spec_hash="abc123", workers=4)
        in_bucket = JobRecord.from_status(job_id, get_json(store, keys.job_status(job_id)))
        assert [r for r in recording_in.newest_first() if r.job_id == job_id] == [in_bucket]
        assert [r for r in bucket.newest_first() if r.job_id == job_id] == [in_bucket]
    last = next(r for r in recording_in.newest_first() if r.job_id == job_id)
    assert (last.state, last.attempt, last.spec_hash, last.workers) == ("cancelled", 2, "abc123", 4)
    # Ended: its duration stops at its end, however late it is listed.
    assert last.summary(now=last.updated_at + 50)["duration_s"] == pytest.approx(last.updated_at - last.created_at)


def test_a_table_write_that_fails_is_logged_and_the_list_reads_the_bucket(
    table: TableRegistry, data_store: tuple[StorageSpec, Channel], caplog: pytest.LogCaptureFixture
) -> None:
    _, store = data_store
    job_id = f"gap-{secrets.token_hex(3)}"
    records.set_status(store, job_id, 1, records.RUNNING)
    table.save(JobRecord.from_status(job_id, records.status(store, job_id)))
    # The job ends while its table cannot be written (here: gone); the bucket has the ending.
    records.set_status(store, job_id, 1, records.SUCCEEDED, finished_at=200.0)
    broken = TableRegistry(table.client, "no-such-table")
    with caplog.at_level("ERROR", logger="lambdaml.runtime.registry"):
        broken.save(JobRecord.from_status(job_id, records.status(store, job_id)))  # does not raise
    assert f"job {job_id}: its state 'succeeded' is in the bucket but not in no-such-table" in caplog.text
    assert "ResourceNotFoundException" in caplog.text

    # The table still holds it as running; the list confirms that against the bucket.
    assert [r.state for r in table.newest_first() if r.job_id == job_id] == ["running"]
    confirmed = TableRegistry(table.client, table.table, bucket=store)
    assert [r.state for r in confirmed.newest_first() if r.job_id == job_id] == ["succeeded"]
