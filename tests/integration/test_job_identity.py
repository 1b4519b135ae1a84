"""A job id is claimed once; an interrupted job goes on with --resume, to the model it would have made.

Everything runs against real parts: moto's S3 (its conditional writes are what claims an id),
a real Redis, worker processes, and Lambda's handlers as Lambda calls them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.backends import JobEvent
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.errors import ConfigError
from lambdaml.platforms.aws_lambda import handlers as lambda_handlers
from lambdaml.runtime import records
from lambdaml.runtime.reports import JobResult
from lambdaml.storage import get_json
from tests.helpers import Services, channel_spec, unique_name
from tests.lambda_harness import FakeContext, invoker, model, start

WORKERS = 3


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    X, y, _ = synthetic.higgs_like(1200, seed=8)
    shards.prepare(data_store[1], "identity", X, y, shards=WORKERS)
    return data_store


def make_job(storage: StorageSpec, channel: Any, *, lr: float = 0.5, epochs: int = 3, **sync: Any) -> JobSpec:
    return parse_job(
        {
            "name": "ident",
            "workers": WORKERS,
            "dataset": "identity",
            "storage": storage.model_dump(),
            "channel": channel.model_dump(),
            "algorithm": {"name": "ga_sgd", "epochs": epochs, "batch_size": 40, "lr": lr},
            "sync": {"timeout_s": 20, **sync},
            "runtime": {"checkpoint_every": 3, "margin_s": 0},
        }
    )


@pytest.fixture(scope="module")
def uninterrupted(storage: tuple[StorageSpec, Channel], services: Services) -> np.ndarray:
    spec, store = storage
    result = run_job(make_job(spec, channel_spec("redis", services)), results_dir=None)
    return model(store, result.job_id)


def ctrl_c(event: JobEvent) -> None:
    """The user presses Ctrl-C once the first epoch is reported."""
    raise KeyboardInterrupt


def stored(store: Channel, job_id: str) -> dict[str, bytes]:
    return {k: store.get(k) for k in (keys.job_result(job_id), keys.job_model(job_id))}


def test_a_reused_job_id_is_refused_and_the_first_result_stands(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    job_id = unique_name("reuse")
    run_job(make_job(spec, channel_spec("memory", None)), job_id=job_id, results_dir=None)
    first = stored(store, job_id)
    with pytest.raises(ConfigError) as info:
        run_job(make_job(spec, channel_spec("memory", None), lr=0.05), job_id=job_id, results_dir=None)
    message = str(info.value)
    assert f"job id {job_id!r} is taken (succeeded" in message and "another --job-id" in message
    assert "\n" not in message
    assert stored(store, job_id) == first, "the refused start changed the first job's result or model"


def test_two_starts_of_one_id_at_once_one_wins_and_the_other_is_refused_at_once(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    job_id = unique_name("twice")
    job = make_job(spec, channel_spec("memory", None))
    outcomes: dict[int, Any] = {}
    refused_after: list[float] = []
    barrier = threading.Barrier(2)

    def start_it(which: int) -> None:
        barrier.wait()
        began = time.monotonic()
        try:
            outcomes[which] = run_job(job, job_id=job_id, results_dir=None)
        except ConfigError as exc:
            refused_after.append(time.monotonic() - began)
            outcomes[which] = exc

    threads = [threading.Thread(target=start_it, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    results = [o for o in outcomes.values() if isinstance(o, JobResult)]
    refusals = [o for o in outcomes.values() if isinstance(o, ConfigError)]
    assert len(results) == 1 and len(refusals) == 1, outcomes
    # Moto's conditional PUT is not atomic: two at once may both create the spec, and then the
    # attempt's claim, the second conditional write, refuses the loser. Either refusal is at once.
    assert "is taken" in str(refusals[0]) or "its first attempt was claimed by another start" in str(refusals[0])
    assert refused_after[0] < 10, "the loser waited instead of being refused at once"
    assert results[0].status == "succeeded" and results[0].attempt == 1
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"


def test_a_reused_job_id_on_the_lambda_runtime_is_refused(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    lam = invoker()
    job_id = start(make_job(spec, channel_spec("redis", services)), lam)
    lam.join()
    first = stored(store, job_id)
    again = make_job(spec, channel_spec("redis", services), lr=0.05)
    answer = lambda_handlers.coordinate(
        {"action": "start", "job": again.model_dump(mode="json"), "job_id": job_id, "worker_function": "worker"},
        FakeContext("coordinator", 10**9),
        invoker=lam,
    )
    assert answer["state"] == "rejected" and "is taken" in answer["error"], answer
    lam.join()
    assert stored(store, job_id) == first
    assert all(e["job_id"] != job_id or e["attempt"] == 1 for e in lam.events), "a refused start invoked workers"


def test_an_interrupted_local_job_resumes_from_its_checkpoints_to_the_uninterrupted_model(
    storage: tuple[StorageSpec, Channel], services: Services, uninterrupted: np.ndarray
) -> None:
    spec, store = storage
    job = make_job(spec, channel_spec("redis", services))
    job_id = unique_name("resume")
    with pytest.raises(KeyboardInterrupt):
        run_job(job, job_id=job_id, on_event=ctrl_c, results_dir=None)
    assert get_json(store, keys.job_status(job_id))["state"] == "interrupted"
    assert not store.get_many([keys.job_result(job_id)])

    with pytest.raises(ConfigError, match=r"taken.*--resume"):  # the id stays claimed
        run_job(job, job_id=job_id, results_dir=None)
    with pytest.raises(ConfigError, match=r"different job file.*algorithm\.lr"):
        run_job(make_job(spec, channel_spec("redis", services), lr=0.05), job_id=job_id, resume=True)

    result = run_job(job, job_id=job_id, resume=True, results_dir=None)
    assert result.attempt == 2 and result.status == "succeeded"
    attempt = records.read_attempt(store, job_id, 2)
    assert attempt.resume is not None and attempt.resume.attempt == 1 and attempt.resume.round > 0
    np.testing.assert_array_equal(model(store, job_id), uninterrupted)
    with pytest.raises(ConfigError, match="has finished"):
        run_job(job, job_id=job_id, resume=True, results_dir=None)


def test_a_lambda_job_cancelled_mid_run_resumes_to_the_uninterrupted_model(
    storage: tuple[StorageSpec, Channel], services: Services, uninterrupted: np.ndarray
) -> None:
    spec, store = storage
    job = make_job(spec, channel_spec("redis", services))
    lam = invoker()
    lam.calls_per_invocation = 8  # every invocation stops for a continuation after 7 steps
    lam.drop = lambda event: event["invocation"] > 1  # ... which never comes: attempt 1 stalls
    job_id = start(job, lam)
    lam.join()
    event = {"action": "cancel", "job_id": job_id, "job": job.model_dump(mode="json")}
    resume = {"action": "resume", "job_id": job_id, "job": job.model_dump(mode="json"), "worker_function": "worker"}
    running = lambda_handlers.coordinate(resume, FakeContext("coordinator", 10**9), invoker=lam)
    assert running["state"] == "rejected" and "still running" in running["error"], running
    assert lambda_handlers.coordinate(event, FakeContext("coordinator", 10**9), invoker=lam)["state"] == "cancelled"

    lam.drop = lambda event: False
    lam.calls_per_invocation = 10**9
    answer = lambda_handlers.coordinate(resume, FakeContext("coordinator", 10**9), invoker=lam)
    assert answer == {"job_id": job_id, "attempt": 2, "state": "running"}, answer
    lam.join()
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
    point = records.read_attempt(store, job_id, 2).resume
    assert point is not None and point.round == 6, point  # the newest multiple of 3 every rank passed
    np.testing.assert_array_equal(model(store, job_id), uninterrupted)


def test_resume_of_an_asp_job_is_refused_in_one_line(storage: tuple[StorageSpec, Channel], services: Services) -> None:
    spec, _ = storage
    job = make_job(spec, channel_spec("redis", services), protocol="asp")
    job_id = unique_name("asp")
    with pytest.raises(KeyboardInterrupt):
        run_job(job, job_id=job_id, on_event=ctrl_c, results_dir=None)
    with pytest.raises(ConfigError, match="continues BSP jobs") as info:
        run_job(job, job_id=job_id, resume=True, results_dir=None)
    assert "\n" not in str(info.value)
