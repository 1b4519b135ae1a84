"""Lambda's calling conventions in-process: a fake context and an invoker on threads.

The handlers run exactly as Lambda calls them; the context's clock is counted in calls so
a run stops (or "dies") at a known step, and the invoker retries a crashed asynchronous
event twice, as AWS does.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lambdaml import codec, keys
from lambdaml.channels import Channel
from lambdaml.config import JobSpec, StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.platforms.aws_lambda import handlers as lambda_handlers
from lambdaml.runtime import records
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import JobResult
from lambdaml.storage import get_json


class FakeContext:
    """Lambda's context with a budget counted in calls, so a run stops at a known step.

    The worker asks for the remaining time before every step; ``die_at`` makes that call
    raise instead, as if the process were killed between two rounds.
    """

    def __init__(self, name: str, calls: int, die_at: int | None = None) -> None:
        self.function_name = name
        self.aws_request_id = f"req-{next(_ids)}"
        self.memory_limit_in_mb = 1024
        self._calls = calls
        self._made = 0
        self._die_at = die_at

    def get_remaining_time_in_millis(self) -> int:
        self._made += 1
        if self._made == self._die_at:
            raise RuntimeError("killed mid-run")
        return 900_000 if self._made < self._calls else 1


_ids = itertools.count()


@dataclass
class ThreadInvoker:
    """Runs asynchronous invocations on threads, with AWS's two retries of a crashed event."""

    handlers: dict[str, Callable[..., dict[str, Any]]]
    calls_per_invocation: int = 10**9
    crash: Callable[[dict[str, Any]], int | None] = lambda event: None
    drop: Callable[[dict[str, Any]], bool] = lambda event: False
    threads: list[threading.Thread] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def invoke_async(self, function: str, payload: dict[str, Any]) -> None:
        self.events.append(payload)
        if self.drop(payload):
            return  # the invocation never runs: a worker that never comes back
        thread = threading.Thread(target=self._run, args=(function, payload), daemon=True)
        self.threads.append(thread)
        thread.start()

    def _run(self, function: str, payload: dict[str, Any]) -> None:
        for _attempt in range(3):
            try:
                context = FakeContext(function, self.calls_per_invocation, self.crash(payload))
                self.outcomes.append(self.handlers[function](payload, context, invoker=self))
                return
            except RuntimeError:
                continue  # AWS retries an asynchronous event that failed

    def join(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while any(t.is_alive() for t in self.threads):
            assert time.monotonic() < deadline, "invocations still running"
            time.sleep(0.05)


def invoker() -> ThreadInvoker:
    return ThreadInvoker({"worker": lambda_handlers.work, "coordinator": lambda_handlers.coordinate})


def start(job: JobSpec, invoker: ThreadInvoker) -> str:
    answer = lambda_handlers.coordinate(
        {"action": "start", "job": job.model_dump(mode="json"), "worker_function": "worker"},
        FakeContext("coordinator", 10**9),
        invoker=invoker,
    )
    assert answer["state"] == "running", answer
    return str(answer["job_id"])


def model(store: Channel, job_id: str) -> np.ndarray:
    return codec.decode_bundle(store.get(keys.job_model(job_id)))["params"]


def stored_result(store: Channel, job_id: str) -> JobResult:
    """The result record rank 0 wrote to the data bucket."""
    return JobResult.from_json(get_json(store, keys.job_result(job_id)), keys.job_result(job_id))


def prepare_dataset(data_store: tuple[StorageSpec, Channel], name: str, workers: int) -> tuple[StorageSpec, Channel]:
    """The small Higgs-like dataset the runtime tests train on, in ``workers`` shards."""
    X, y, _ = synthetic.higgs_like(1200, seed=8)
    shards.prepare(data_store[1], name, X, y, shards=workers)
    return data_store


def sent_event(lam: ThreadInvoker, rank: int, invocation: int = 1) -> dict[str, Any]:
    """The event a rank's invocation was sent (a duplicate delivery is this event again, MAC key included)."""
    return next(e for e in lam.events if e["rank"] == rank and e.get("invocation", 1) == invocation)


def claimed(store: Channel, job: JobSpec, job_id: str) -> Attempt:
    """Claim ``job_id`` as the coordinator does, for tests that invoke the workers by hand."""
    version = shards.read_manifest(store, job.dataset).dataset_version
    return records.claim_job(store, job, job_id, version)
