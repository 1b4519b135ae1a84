"""The direct channel: jobs whose workers exchange values over TCP links give the model a store
gives, bit for bit, whether their links hold, are dropped mid-job, or a worker or the rendezvous
service dies. The handlers run as Lambda runs them (``tests/lambda_harness.py``); links, stores
and the reflector are real. Faults strike at fixed points (a round, a message), never by time.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.channels import Channel, open_channel
from lambdaml.cli.output import links_line
from lambdaml.comm.direct.communicator import DirectCommunicator
from lambdaml.config import ChannelSpec, JobSpec, StorageSpec, parse_job
from lambdaml.local import services as local_services
from lambdaml.runtime import worker as worker_module
from lambdaml.storage import get_json
from tests.helpers import Services, channel_spec
from tests.lambda_harness import invoker, model, prepare_dataset, start, stored_result

pytestmark = pytest.mark.timeout(240)

RING, DOUBLING = 0, 1 << 30  # small_bytes: every vector by reduce-scatter, or by recursive doubling


def make_job(storage: StorageSpec, channel: dict[str, Any], workers: int, dataset: str, **sync: Any) -> JobSpec:
    return parse_job(
        {
            "name": "direct",
            "workers": workers,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": channel,
            "model": {"name": "lr"},
            "algorithm": {"name": "ga_sgd", "epochs": 2, "batch_size": 40, "lr": 0.5},
            "sync": {"timeout_s": 30, **sync},
            "runtime": {"checkpoint_every": 3, "margin_s": 0},
        }
    )


def direct(services: Services, store: str = "redis", **fields: Any) -> dict[str, Any]:
    return {"kind": "direct", "rendezvous": channel_spec(store, services).model_dump(), "link_timeout_s": 10, **fields}


def run(job: JobSpec, store: Channel) -> tuple[np.ndarray, str]:
    lam = invoker()
    job_id = start(job, lam)
    lam.join()
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
    return model(store, job_id), job_id


def link_counts(store: Channel, job_id: str, name: str) -> list[float]:
    return [getattr(row.channel, name) for row in stored_result(store, job_id).workers]


def assert_no_keys_left(spec: ChannelSpec, job_id: str) -> None:
    with open_channel(spec) as opened:
        assert opened.list(keys.comm_prefix(job_id)) == [], "the job left keys on its store"


@pytest.fixture(scope="module", params=[2, 4, 8])
def world(request: pytest.FixtureRequest, data_store: tuple[StorageSpec, Channel]) -> tuple[int, StorageSpec, Channel]:
    workers = int(request.param)
    spec, store = prepare_dataset(data_store, f"direct{workers}", workers)
    return workers, spec, store


@pytest.fixture(scope="module")
def on_stores(world: tuple[int, StorageSpec, Channel], services: Services) -> np.ndarray:
    """The model of the job on Redis (AllReduce) and on S3 (ScatterReduce): the same, bit for bit."""
    workers, spec, store = world
    dataset = f"direct{workers}"
    redis, _ = run(
        make_job(spec, channel_spec("redis", services).model_dump(), workers, dataset, pattern="allreduce"), store
    )
    s3, _ = run(
        make_job(spec, channel_spec("s3", services).model_dump(), workers, dataset, pattern="scatter_reduce"), store
    )
    np.testing.assert_array_equal(redis, s3)
    return redis


@pytest.mark.parametrize("small_bytes", [RING, DOUBLING], ids=["ring", "doubling"])
def test_a_direct_job_gives_the_model_the_stores_give(
    small_bytes: int, world: tuple[int, StorageSpec, Channel], services: Services, on_stores: np.ndarray
) -> None:
    workers, spec, store = world
    channel = direct(services, small_bytes=small_bytes)
    params, job_id = run(make_job(spec, channel, workers, f"direct{workers}"), store)
    np.testing.assert_array_equal(params, on_stores)
    assert link_counts(store, job_id, "links_direct") == [workers - 1] * workers
    assert link_counts(store, job_id, "rounds_fallback") == [0] * workers
    assert all(sent > 0 for sent in link_counts(store, job_id, "bytes_sent_links"))
    assert_no_keys_left(ChannelSpec(**channel), job_id)


class Dropping(DirectCommunicator):
    """Rank 1 drops its link to rank 0 in round 3: a network fault at a fixed point."""

    def _reduce(self, x: Any, codec: Any) -> Any:
        if self.rank == 1 and self.round == 3:
            self.connect()
            self.drop_link(0, "dropped by the test")
        return super()._reduce(x, codec)


@pytest.mark.parametrize("small_bytes", [RING, DOUBLING], ids=["ring", "doubling"])
def test_links_dropped_mid_job_fall_back_to_the_store_and_give_the_same_model(
    small_bytes: int,
    world: tuple[int, StorageSpec, Channel],
    services: Services,
    on_stores: np.ndarray,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workers, spec, store = world
    monkeypatch.setattr(worker_module, "DirectCommunicator", Dropping)
    channel = direct(services, "s3", small_bytes=small_bytes)
    params, job_id = run(make_job(spec, channel, workers, f"direct{workers}"), store)
    np.testing.assert_array_equal(params, on_stores)
    dropped = link_counts(store, job_id, "links_dropped")
    assert dropped[0] == 1 and dropped[1] == 1 and sum(dropped) == 2
    fallback = link_counts(store, job_id, "rounds_fallback")
    assert fallback[1] > 0, "rank 1 exchanged with rank 0 through the store after round 3"
    pairs = workers * (workers - 1) // 2
    assert f"links: {pairs} of {pairs} pairs direct, 1 dropped; " in str(links_line(stored_result(store, job_id)))
    assert_no_keys_left(ChannelSpec(**channel), job_id)


# --- kill trials -------------------------------------------------------------------------


KILL_WORKERS = 3


@pytest.fixture(scope="module")
def kill_world(data_store: tuple[StorageSpec, Channel], services: Services) -> tuple[StorageSpec, Channel, np.ndarray]:
    spec, store = prepare_dataset(data_store, "directkill", KILL_WORKERS)
    fault_free, _ = run(make_job(spec, channel_spec("redis", services).model_dump(), KILL_WORKERS, "directkill"), store)
    return spec, store, fault_free


def killing(victim: int, at: int, killed: list[int]) -> type[DirectCommunicator]:
    """A communicator whose rank ``victim`` dies at its ``at``-th message (sent or awaited) in its first
    run: its links close as a process's do when it dies, and nothing it owed is handed over."""

    class Killing(DirectCommunicator):
        messages = 0

        def _count(self) -> None:
            if self.rank == victim and not killed:
                self.messages += 1
                if self.messages == at:
                    killed.append(at)
                    if self._links is not None:
                        self._links.close(None, 1.0)  # the sockets close; no goodbye, no hand-over
                    raise RuntimeError(f"rank {victim} killed at message {at}")

        def post(self, *args: Any, **kwargs: Any) -> None:
            self._count()
            super().post(*args, **kwargs)

        def fetch(self, *args: Any, **kwargs: Any) -> dict[int, memoryview]:
            self._count()
            return super().fetch(*args, **kwargs)

        def abandon(self) -> None:
            if not (self.rank == victim and killed == [at]):
                super().abandon()

    return Killing


@pytest.mark.parametrize("seed", range(6))
def test_a_direct_worker_killed_mid_round_resumes_to_the_fault_free_model(
    seed: int,
    kill_world: tuple[StorageSpec, Channel, np.ndarray],
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(500 + seed)
    spec, store, fault_free = kill_world
    small_bytes = rng.choice([RING, DOUBLING])
    # 2 epochs of 8 rounds; a rank posts and awaits at least 4 times a round (W = 3: a ring round's
    # 2 pieces, its merged chunk and 2 waits; doubling's 2 steps of a send and a wait).
    messages = 2 * 8 * 4
    victim, at = rng.randrange(KILL_WORKERS), rng.randrange(1, messages)
    killed: list[int] = []
    monkeypatch.setattr(worker_module, "DirectCommunicator", killing(victim, at, killed))
    channel = direct(services, rng.choice(["redis", "s3", "dynamodb"]), small_bytes=small_bytes)
    params, job_id = run(make_job(spec, channel, KILL_WORKERS, "directkill"), store)
    assert killed == [at], f"rank {victim} was to die at message {at}"
    np.testing.assert_array_equal(params, fault_free)
    assert link_counts(store, job_id, "rounds_fallback")[victim] > 0
    assert_no_keys_left(ChannelSpec(**channel), job_id)


def test_the_rendezvous_service_killed_mid_job_leaves_the_model_unchanged(
    kill_world: tuple[StorageSpec, Channel, np.ndarray], services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, store, fault_free = kill_world
    reflector = local_services.start_reflector()

    class KillsReflector(DirectCommunicator):
        def _reduce(self, x: Any, codec: Any) -> Any:
            if self.rank == 0 and self.round == 2:
                reflector.process.kill()
                reflector.process.wait(30)
            return super()._reduce(x, codec)

    monkeypatch.setattr(worker_module, "DirectCommunicator", KillsReflector)
    try:
        channel = direct(services, reflector=f"127.0.0.1:{reflector.port}")
        params, job_id = run(make_job(spec, channel, KILL_WORKERS, "directkill"), store)
    finally:
        reflector.process.kill()
    assert reflector.process.returncode is not None
    np.testing.assert_array_equal(params, fault_free)
    assert link_counts(store, job_id, "links_direct") == [KILL_WORKERS - 1] * KILL_WORKERS


def test_a_decentralized_jobs_neighbour_exchanges_go_over_links_with_the_stores_model(
    kill_world: tuple[StorageSpec, Channel, np.ndarray], services: Services
) -> None:
    spec, store, _ = kill_world

    def dpsgd(channel: dict[str, Any]) -> JobSpec:
        job = make_job(spec, channel, KILL_WORKERS, "directkill").model_dump(mode="json")
        return parse_job({**job, "algorithm": {"name": "dpsgd", "epochs": 2, "batch_size": 40, "lr": 0.5}})

    on_redis, _ = run(dpsgd(channel_spec("redis", services).model_dump()), store)
    on_links, job_id = run(dpsgd(direct(services)), store)
    np.testing.assert_array_equal(on_links, on_redis)
    assert link_counts(store, job_id, "rounds_fallback") == [0] * KILL_WORKERS
    # Every step's exchange went over the links: far more bytes than the two sums an epoch carry.
    assert min(link_counts(store, job_id, "bytes_sent_links")) > 16 * 2 * 29 * 8
