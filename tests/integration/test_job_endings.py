"""How a job's attempt ends when two endings race (issue 42, items 7 and 8), on moto's S3 and Redis.

Each race is forced at one point of the code under test (a store that runs a step of the other
party right after a given key is written), never by sleeping.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lambdaml import keys
from lambdaml.backends import BACKENDS
from lambdaml.channels import Channel, open_channel
from lambdaml.channels.s3 import S3Channel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.errors import DataError, JobCancelled
from lambdaml.runtime import records
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.results import channel_residue
from lambdaml.trained.load import read_model
from tests.helpers import Services, unique_name

RESULT = Path(__file__).resolve().parents[1] / "fixtures" / "job_results" / "higgs-lr-local.json"


class PausingStore(S3Channel):
    """The data bucket, but for one step run right after ``key`` is first written (the race's other party)."""

    def __init__(self, store: Channel, key: str, step: Callable[[], None]) -> None:
        assert isinstance(store, S3Channel)
        super().__init__(store.client, store.bucket, store.objects)
        self.key, self.step, self.paused = key, step, False

    def _after(self, key: str) -> None:
        if key == self.key and not self.paused:
            self.paused = True
            self.step()

    def _put(self, key: str, data: bytes) -> None:
        super()._put(key, data)
        self._after(key)

    def _put_new(self, key: str, data: bytes) -> bool:
        created = super()._put_new(key, data)
        self._after(key)
        return created


def a_job(spec: StorageSpec, services: Services) -> JobSpec:
    return parse_job(
        {
            "name": "race",
            "workers": 2,
            "dataset": "d",
            "storage": spec.model_dump(mode="json"),
            "channel": {"kind": "redis", "port": services.redis_port},
        },
        "job",
    )


def a_result(job_id: str, bucket: str) -> JobResult:
    result = JobResult.from_json(json.loads(RESULT.read_text()), str(RESULT))
    return replace(result, job_id=job_id, attempt=1, model_uri=f"s3://{bucket}/{keys.job_model(job_id)}")


@pytest.fixture
def started(data_store: tuple[StorageSpec, Channel], services: Services) -> tuple[StorageSpec, Channel, JobSpec, str]:
    spec, store = data_store
    job = a_job(spec, services)
    job_id = unique_name("race")
    records.claim_job(store, job, job_id, "v1")
    store.put(keys.job_model(job_id), b"a complete model")  # rank 0 wrote it before the finish
    return spec, store, job, job_id


def cancel(spec: StorageSpec, job_id: str) -> dict[str, Any]:
    return BACKENDS.get("local")(spec).cancel(job_id)


def test_a_cancel_between_the_result_and_the_success_mark_wins_and_the_model_is_not_advertised(
    started: tuple[StorageSpec, Channel, JobSpec, str],
) -> None:
    spec, store, _, job_id = started
    said: list[dict[str, Any]] = []
    pausing = PausingStore(store, keys.job_result(job_id), lambda: said.append(cancel(spec, job_id)))
    with pytest.raises(JobCancelled, match="cancelled as it finished"):
        records.finish(pausing, records.read_attempt(store, job_id, 1), a_result(job_id, spec.bucket))
    assert said[0]["state"] == records.CANCELLED
    record = records.status(store, job_id)
    assert record["state"] == records.CANCELLED and "model_uri" not in record and "result_key" not in record
    assert not store.get_many([keys.job_result(job_id)]), "a cancelled job's result is still there"
    with pytest.raises(DataError, match="is cancelled, not succeeded"):
        read_model(store, job_id)


def test_a_cancel_after_the_finish_won_says_the_job_had_succeeded(
    started: tuple[StorageSpec, Channel, JobSpec, str],
) -> None:
    spec, store, _, job_id = started
    said: list[dict[str, Any]] = []
    # The finish has claimed the attempt's ending; its state record is yet to say so.
    pausing = PausingStore(store, keys.job_attempt_ended(job_id, 1), lambda: said.append(cancel(spec, job_id)))
    records.finish(pausing, records.read_attempt(store, job_id, 1), a_result(job_id, spec.bucket))
    assert said[0]["state"] == records.SUCCEEDED
    record = records.status(store, job_id)
    assert record["state"] == records.SUCCEEDED
    assert record["model_uri"] == f"s3://{spec.bucket}/{keys.job_model(job_id)}"
    assert store.get_many([keys.job_result(job_id)]), "a succeeded job lost its result"
    with pytest.raises(DataError, match="has no model card"):  # past the state check: its model is offered
        read_model(store, job_id)


def test_clean_keeps_what_an_attempt_resumed_after_it_looked_writes(
    started: tuple[StorageSpec, Channel, JobSpec, str],
) -> None:
    """``clean --older-than 0s`` finds the job ended; it is resumed before the deletes run."""
    _, store, job, job_id = started
    records.set_status(store, job_id, 1, records.FAILED, error="worker 1 died")
    old_beat = keys.worker_heartbeat(job_id, 1, 0)
    store.put(old_beat, b"{}")
    with open_channel(job.channel) as channel:
        channel.put(keys.comm_key(job_id, 3, "grad", rank=0, attempt=1), b"old")
        ended = records.ended_jobs(store, older_than_s=0)
        assert job_id in ended

        # Here the job is resumed: attempt 2 runs and writes its keys.
        resumed = records.resume_job(store, job, job_id, stale_after_s=60)
        live_beat = keys.worker_heartbeat(job_id, 2, 0)
        live_key = keys.comm_key(job_id, 1, "grad", rank=0, attempt=resumed.number)
        store.put(live_beat, b"{}")
        channel.put(live_key, b"live")

        removed = records.clean_jobs(store, ended)
        assert store.get_many([old_beat, live_beat]).keys() == {old_beat, live_beat}
        assert removed.get(job_id, 0) == 0
        count = channel_residue(job, job_id, still_ended=lambda n: records.attempt_ended(store, job_id, n))
        assert channel.get(live_key) == b"live", "clean deleted a live channel key of the resumed attempt"
        assert count == 0

        # Once the resumed attempt has ended, both attempts' keys go.
        records.set_status(store, job_id, 2, records.FAILED, error="again")
        assert records.clean_jobs(store, records.ended_jobs(store, older_than_s=0))[job_id] == 2
        still = lambda n: records.attempt_ended(store, job_id, n)  # noqa: E731
        assert channel_residue(job, job_id, still_ended=still) == 2
        assert not channel.list(keys.comm_job_prefix(job_id))
