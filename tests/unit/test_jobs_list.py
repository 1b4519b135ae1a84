"""``lambdaml jobs``: every job of a data bucket on moto, newest first, from a listing past one page."""

from __future__ import annotations

import json

import pytest

from lambdaml import cli, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.runtime import records
from lambdaml.runtime.registry import BucketRegistry
from lambdaml.storage import open_storage, put_json


@pytest.fixture(scope="module")
def three_jobs(data_store: tuple[StorageSpec, Channel]) -> StorageSpec:
    spec, store = data_store
    states = {
        "aa-old": ("succeeded", 100.0, 160.0),
        "mm-mid": ("failed", 200.0, 230.0),
        "zz-new": ("running", 300.0, 0),
    }
    for job_id, (state, created, finished) in states.items():
        fields = {"finished_at": finished} if finished else {}
        if state == "succeeded":
            fields["cost_dollars"] = 0.000495
        put_json(store, keys.job_status(job_id), {"state": state, "attempt": 2, "created_at": created, **fields,
                                                  "updated_at": finished or created})  # fmt: skip
    # More keys than one listing page holds, sorting before the newest job's record.
    store.put_many([(f"jobs/mm-mid/a0001/checkpoints/{i:04d}", b"x") for i in range(1001)])
    return spec


def jobs(spec: StorageSpec, *more: str) -> list[str]:
    return ["jobs", "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url), *more]


def test_every_job_newest_first_with_its_duration_and_cost(three_jobs: StorageSpec) -> None:
    summaries = records.job_summaries(BucketRegistry(open_storage(three_jobs), page_size=2), now=400.0)
    assert [s["job_id"] for s in summaries] == ["zz-new", "mm-mid", "aa-old"]
    assert [s["duration_s"] for s in summaries] == [100.0, 30.0, 60.0]  # a running job's, so far
    assert [s["cost_dollars"] for s in summaries] == [None, None, 0.000495]


def test_the_command_lists_filters_and_prints_json(three_jobs: StorageSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(jobs(three_jobs)) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.split() and line.split()[0] in ("aa-old", "mm-mid", "zz-new")]
    assert [r[:3] for r in rows] == [
        ["zz-new", "running", "2"],
        ["mm-mid", "failed", "2"],
        ["aa-old", "succeeded", "2"],
    ]
    assert rows[2][-2:] == ["60.0s", "$0.000495"] and rows[0][-1] == "-"
    assert all(len(line) <= 80 for line in lines)

    assert cli.main(jobs(three_jobs, "--state", "failed", "--output", "json")) == 0
    assert [s["job_id"] for s in json.loads(capsys.readouterr().out)] == ["mm-mid"]
    assert cli.main(jobs(three_jobs, "--state", "cancelled")) == 0
    where = f"s3://{three_jobs.bucket}/ at {three_jobs.endpoint_url}"
    assert capsys.readouterr().out.strip() == f"no jobs cancelled in {where}"  # and where it looked
    assert cli.main(jobs(three_jobs, "--state", "done")) == 1
    assert "invalid choice: 'done'" in capsys.readouterr().err
