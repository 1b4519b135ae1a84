"""``lambdaml clean`` on a bucket on moto: ended jobs lose what their attempts left, and only that."""

from __future__ import annotations

import json
import socket
import time

import pytest

from lambdaml import cli, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.storage import put_json

DAY = 86_400.0


def residue(job_id: str) -> list[str]:
    return [
        keys.worker_checkpoint(job_id, 1, 0, "s0"),
        keys.worker_heartbeat(job_id, 1, 0),
        keys.worker_report(job_id, 2, 1),
        keys.job_cancel(job_id, 2),
    ]


def records_of(job_id: str) -> list[str]:
    return [keys.job_spec(job_id), keys.job_attempt(job_id, 1), keys.job_status(job_id), keys.job_result(job_id),
            keys.job_model(job_id)]  # fmt: skip


@pytest.fixture
def four_jobs(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    spec, store = data_store
    store.clear(keys.JOBS_PREFIX)
    now = time.time()
    for job_id, state, ended in (
        ("old-ok", "succeeded", now - 10 * DAY),
        ("old-failed", "failed", now - 8 * DAY),
        ("new-ok", "succeeded", now - 3600),
        ("still-running", "running", now - 10 * DAY),  # however long ago it last changed
    ):
        store.put_many([(key, b"x") for key in records_of(job_id) + residue(job_id)])
        put_json(store, keys.job_status(job_id), {"state": state, "attempt": 2, "created_at": ended - 60,
                                                  "updated_at": ended})  # fmt: skip
    return spec, store


def clean(spec: StorageSpec, *more: str) -> list[str]:
    return ["clean", "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url), *more]


def test_clean_removes_ended_jobs_residue_by_age_and_keeps_their_records(
    four_jobs: tuple[StorageSpec, Channel], capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = four_jobs
    everything = set(store.list(keys.JOBS_PREFIX))
    assert cli.main(clean(spec, "--dry-run")) == 0
    assert "would remove 8 objects and 0 channel keys of 2 ended jobs" in capsys.readouterr().out
    assert set(store.list(keys.JOBS_PREFIX)) == everything

    assert cli.main(clean(spec)) == 0  # ended over 7 days ago
    out = capsys.readouterr().out
    assert "job old-ok: removed 4 objects" in out and "job old-failed: removed 4 objects" in out
    assert set(store.list(keys.JOBS_PREFIX)) == everything - set(residue("old-ok") + residue("old-failed"))

    assert cli.main(clean(spec, "--older-than", "0s")) == 0
    left = set(store.list(keys.JOBS_PREFIX))
    assert not left & set(residue("new-ok")) and set(residue("still-running")) <= left
    assert all(set(records_of(job_id)) <= left for job_id in ("old-ok", "old-failed", "new-ok", "still-running"))


def test_an_age_that_does_not_parse_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["clean", "--older-than", "7w"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'7w' is not an age" in err[0]


def test_a_channel_out_of_reach_is_named_once_and_the_bucket_is_still_cleaned(
    four_jobs: tuple[StorageSpec, Channel], capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = four_jobs
    with socket.socket() as probe:  # a port nothing listens on: a cache this machine cannot reach
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    channel = {"kind": "redis", "port": port, "connect_timeout_s": 1}
    job = {"name": "j", "workers": 2, "dataset": "d", "channel": channel}
    for job_id in ("old-ok", "old-failed"):
        put_json(store, keys.job_spec(job_id), job)
    assert cli.main(clean(spec)) == 0
    captured = capsys.readouterr()
    warned = captured.err.splitlines()  # once, though two jobs used that channel
    assert len(warned) == 1 and warned[0].startswith(f"warning: the redis channel 127.0.0.1:{port} is out of reach (")
    assert warned[0].endswith("; its keys stay")
    assert "job old-ok: removed 4 objects" in captured.out and "job old-failed: removed 4 objects" in captured.out


def test_results_and_models_go_only_when_asked_and_the_jobs_stay_listed(
    four_jobs: tuple[StorageSpec, Channel], capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = four_jobs
    assert cli.main(clean(spec, "--older-than", "0s", "--results")) == 0
    assert "results and models too" in capsys.readouterr().out
    left = set(store.list(keys.JOBS_PREFIX))
    for job_id in ("old-ok", "old-failed", "new-ok"):
        assert {keys.job_result(job_id), keys.job_model(job_id)}.isdisjoint(left)
        assert {keys.job_spec(job_id), keys.job_status(job_id)} <= left
    assert set(records_of("still-running")) <= left  # a running job keeps everything
    assert cli.main(["jobs", "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url), "--json"]) == 0
    assert {"old-ok", "old-failed", "new-ok", "still-running"} <= {
        s["job_id"] for s in json.loads(capsys.readouterr().out)
    }
