"""The Lambda runtime's promises, with the handlers called as Lambda would call them:
long jobs continue across invocations, crashed workers resume, duplicates are harmless,
and a worker that never comes back fails the job clearly instead of hanging it."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.driver import run_job
from lambdaml.platforms.aws_lambda import handlers as lambda_handlers
from lambdaml.storage import get_json
from tests.helpers import Services, channel_spec
from tests.lambda_harness import FakeContext, invoker, model, prepare_dataset, sent_event, start, stored_result

WORKERS = 3


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    return prepare_dataset(data_store, "lambda", WORKERS)


def make_job(storage: StorageSpec, services: Services, **sync: Any) -> JobSpec:
    return parse_job(
        {
            "name": "lam",
            "workers": WORKERS,
            "dataset": "lambda",
            "storage": storage.model_dump(),
            "channel": channel_spec("redis", services).model_dump(),
            "algorithm": {"name": "ga_sgd", "epochs": 3, "batch_size": 40, "lr": 0.5},
            "sync": {"timeout_s": 20, **sync},
            "runtime": {"checkpoint_every": 5, "margin_s": 0},
        }
    )


@pytest.fixture(scope="module")
def uninterrupted(storage: tuple[StorageSpec, Channel], services: Services) -> np.ndarray:
    spec, store = storage
    result = run_job(make_job(spec, services), results_dir=None)
    return model(store, result.job_id)


def test_long_job_continues_across_invocations_to_the_same_model(
    storage: tuple[StorageSpec, Channel], services: Services, uninterrupted: np.ndarray
) -> None:
    spec, store = storage
    lam = invoker()
    lam.calls_per_invocation = 4  # each invocation "runs out of time" after 3 steps; 30 steps need 10
    began = time.monotonic()
    job_id = start(make_job(spec, services), lam)
    lam.join()

    result = stored_result(store, job_id)
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
    assert min(result.invocations) >= 3
    np.testing.assert_array_equal(model(store, job_id), uninterrupted)
    # Cost: every invocation billed at the context's 1,024 MB, and the channel's requests.
    cost = result.cost
    assert cost["lambda"]["invocations"] == sum(result.invocations)
    busy = sum(w.times.total_s for w in result.workers)  # time inside the training loop
    assert busy <= cost["lambda"]["gb_seconds"] <= WORKERS * (time.monotonic() - began)
    assert cost["channel"]["requests"] == sum(w.channel.requests for w in result.workers)
    assert cost["total_dollars"] > cost["lambda"]["dollars"] > 0


def test_worker_killed_mid_round_resumes_from_its_checkpoint(
    storage: tuple[StorageSpec, Channel], services: Services, uninterrupted: np.ndarray
) -> None:
    spec, store = storage
    lam = invoker()
    lam.calls_per_invocation = 25  # continuations after 24 steps
    killed: set[int] = set()

    def crash(event: dict[str, Any]) -> int | None:
        # Rank 1's first invocation dies once at its 9th step, 3 rounds after its checkpoint
        # at round 5: the retry resumes there and replays rounds 5-7 with the others waiting.
        if event["rank"] == 1 and event["invocation"] == 1 and 1 not in killed:
            killed.add(1)
            return 9
        return None

    lam.crash = crash
    job_id = start(make_job(spec, services), lam)
    lam.join()
    assert killed == {1}
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
    np.testing.assert_array_equal(model(store, job_id), uninterrupted)


def test_duplicate_invocation_of_a_rank_does_not_corrupt_the_result(
    storage: tuple[StorageSpec, Channel], services: Services, uninterrupted: np.ndarray
) -> None:
    spec, store = storage
    lam = invoker()
    job = make_job(spec, services)
    job_id = start(job, lam)
    lam.invoke_async("worker", sent_event(lam, 2))  # delivered twice
    lam.join()
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
    np.testing.assert_array_equal(model(store, job_id), uninterrupted)


def test_worker_that_never_comes_back_fails_the_job_within_the_timeout(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    lam = invoker()
    lam.drop = lambda event: event["rank"] == 2
    started = time.monotonic()
    job_id = start(make_job(spec, services, timeout_s=3), lam)
    lam.join(timeout=30)
    elapsed = time.monotonic() - started

    status = get_json(store, keys.job_status(job_id))
    assert status["state"] == "failed"
    assert "timed out after 3s" in status["error"]
    assert elapsed < 3 + 10, "no worker may spin past the timeout"
    assert {o["status"] for o in lam.outcomes} == {"failed"}


def test_cancel_stops_a_running_job_and_leaves_its_status(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    lam = invoker()
    job = make_job(spec, services, timeout_s=3)
    job = job.model_copy(update={"algorithm": job.algorithm.model_copy(update={"epochs": 200})})
    job_id = start(job, lam)
    store.wait_for([keys.worker_heartbeat(job_id, 1, 0)], timeout=30)  # cancel a job that is training
    answer = lambda_handlers.coordinate(
        {"action": "cancel", "job_id": job_id, "job": job.model_dump(mode="json")},
        FakeContext("coordinator", 10**9),
        invoker=lam,
    )
    assert answer["state"] == "cancelled"
    lam.join(timeout=30)
    assert get_json(store, keys.job_status(job_id))["state"] == "cancelled"
    assert {o["status"] for o in lam.outcomes} <= {"cancelled", "failed"}
    assert not store.get_many([keys.job_result(job_id)]), "a cancelled job has no result"
    # Cancelling a finished job changes nothing.
    again = lambda_handlers.coordinate(
        {"action": "cancel", "job_id": job_id, "job": job.model_dump(mode="json")},
        FakeContext("coordinator", 10**9),
        invoker=lam,
    )
    assert again["state"] == "cancelled"


def test_coordinator_resumes_a_worker_aws_gave_up_on_then_fails_the_job(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    lam = invoker()
    lam.drop = lambda event: True  # record the invocations only
    job = make_job(spec, services)
    job_id = start(job, lam)
    gave_up = {
        "version": "1.0",
        "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": 3},
        "requestPayload": {**sent_event(lam, 1), "invocation": 2},
    }
    answer = lambda_handlers.coordinate(gave_up, FakeContext("coordinator", 10**9), invoker=lam)
    assert answer == {"job_id": job_id, "state": "running", "resumed_rank": 1}
    assert lam.events[-1]["rank"] == 1 and lam.events[-1]["invocation"] == 3

    # A worker that cannot even import its code meets the same error on every try: no resume.
    sent = len(lam.events)
    broken = {
        **gave_up,
        "responsePayload": {
            "errorType": "Runtime.ImportModuleError",
            "errorMessage": "Unable to import module 'worker.app': No module named 'numpy'",
        },
    }
    assert lambda_handlers.coordinate(broken, FakeContext("coordinator", 10**9), invoker=lam)["state"] == "failed"
    assert len(lam.events) == sent
    error = get_json(store, keys.job_status(job_id))["error"]
    assert "Runtime.ImportModuleError" in error and "No module named 'numpy'" in error

    last = {**gave_up, "requestPayload": {**gave_up["requestPayload"], "invocation": job.runtime.max_invocations}}
    assert lambda_handlers.coordinate(last, FakeContext("coordinator", 10**9), invoker=lam)["state"] == "failed"
    status = get_json(store, keys.job_status(job_id))
    assert status["state"] == "failed"
    assert "worker 1 kept failing" in status["error"]


def test_asp_job_continues_across_invocations_applying_every_update_once(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    lam = invoker()
    lam.calls_per_invocation = 4  # every invocation stops after 3 steps
    job_id = start(make_job(spec, services, protocol="asp", timeout_s=5), lam)
    lam.join(timeout=240)  # many short invocations: slow on loaded cores, bounded all the same
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
    result = stored_result(store, job_id)
    assert min(result.invocations) >= 3
    pushes = sum(w.async_stats.pushes for w in result.workers)
    assert pushes == 3 * 24  # 3 workers x 3 epochs x 8 steps, none repeated by a continuation
    assert all(w.async_stats.applied == pushes for w in result.workers)
    losses = [p.loss for p in result.loss_curve]
    assert losses[-1] < losses[0]
