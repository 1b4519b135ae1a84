"""A value on a channel is bound to its place: one replayed from another round, rank or job, or
forged by a party that can write the store, fails the job loudly instead of training on.

The party is played by a sabotaged channel client of rank 1: where the job would write rank
1's AllReduce value of round 3, the store gets what an attacker with write access would put
there. The handlers run as Lambda runs them; the channels are real.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from lambdaml import codec, keys
from lambdaml.buffers import Value, joined
from lambdaml.channels import Channel, open_channel
from lambdaml.config import ChannelSpec, JobSpec, StorageSpec, parse_job
from lambdaml.platforms.aws_lambda import handlers as lambda_handlers
from lambdaml.seal import OVERHEAD, Sealer
from lambdaml.storage import get_json
from tests.helpers import Services, channel_spec
from tests.lambda_harness import invoker, model, prepare_dataset, start

WORKERS = 3
VICTIM_ROUND = 3

#: What the attacker writes at rank 1's key of round 3, given what rank 1 wrote in rounds 2 and 3
#: (sealed as the job seals them) and the key.
Forgery = Callable[[dict[int, bytes], str], bytes]


def replay_of_the_round_before(sent: dict[int, bytes], key: str) -> bytes:
    return sent[VICTIM_ROUND - 1]


def negated_with_a_valid_checksum(sent: dict[int, bytes], key: str) -> bytes:
    """Rank 1's real gradient, negated, as a well-formed tensor bound to the right key (no secret needed)."""
    value = codec.decode(sent[VICTIM_ROUND][OVERHEAD:])
    return Sealer().seal(key, codec.encode(-value))


def a_bare_tensor(sent: dict[int, bytes], key: str) -> bytes:
    value = codec.decode(sent[VICTIM_ROUND][OVERHEAD:])
    return codec.encode(-value)


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    return prepare_dataset(data_store, "forged", WORKERS)


def make_job(storage: StorageSpec, channel: ChannelSpec) -> JobSpec:
    return parse_job(
        {
            "name": "forged",
            "workers": WORKERS,
            "dataset": "forged",
            "storage": storage.model_dump(),
            "channel": channel.model_dump(),
            "algorithm": {"name": "ga_sgd", "epochs": 1, "batch_size": 40, "lr": 0.5},
            "sync": {"timeout_s": 5, "pattern": "allreduce"},  # the key forged is an AllReduce value
        }
    )


def run_with_forgery(job: JobSpec, forge: Forgery) -> str:
    """Run the job with rank 1's round-3 value replaced by the forgery; return the job id."""

    def work(event: dict[str, Any], context: Any, *, invoker: Any) -> dict[str, Any]:
        channel = open_channel(job.channel)
        if event["rank"] == 1:
            sabotage(channel)
        try:
            return lambda_handlers.work(event, context, invoker=invoker, channel=channel)
        finally:
            channel.close()

    def sabotage(channel: Channel) -> None:
        put_many = channel.put_many
        sent: dict[int, bytes] = {}

        def forging_put_many(items: Sequence[tuple[str, Value]]) -> list[str]:
            out: list[tuple[str, Value]] = []
            for key, data in items:
                try:
                    parsed = keys.parse_comm_key(key)
                except ValueError:
                    parsed = None
                if parsed is not None and parsed.tag == "ar" and parsed.rank == 1:
                    sent[parsed.round] = joined(data)
                    if parsed.round == VICTIM_ROUND:
                        data = forge(sent, key)
                out.append((key, data))
            return put_many(out)

        channel.put_many = forging_put_many  # type: ignore[method-assign]

    lam = invoker()
    lam.handlers["worker"] = work
    job_id = start(job, lam)
    lam.join()
    return job_id


@pytest.mark.parametrize(
    ("kind", "forge", "refusal"),
    [
        ("redis", replay_of_the_round_before, "fails the job's MAC"),
        ("redis", negated_with_a_valid_checksum, "authenticated with the job's key"),
        ("memcached", negated_with_a_valid_checksum, "authenticated with the job's key"),
        ("redis", a_bare_tensor, "not written by this version"),
        ("s3", replay_of_the_round_before, "written under another key"),
        ("s3", a_bare_tensor, "not written by this version"),
    ],
    ids=["redis-replay", "redis-forged", "memcached-forged", "redis-bare", "s3-replay", "s3-bare"],
)
def test_a_misplaced_or_forged_value_fails_the_job_and_names_its_key(
    storage: tuple[StorageSpec, Channel], services: Services, kind: str, forge: Forgery, refusal: str
) -> None:
    spec, store = storage
    job = make_job(spec, channel_spec(kind, services))
    job_id = run_with_forgery(job, forge)
    status = get_json(store, keys.job_status(job_id))
    assert status["state"] == "failed", status
    victim = keys.comm_key(job_id, VICTIM_ROUND, "ar", rank=1, attempt=1)
    assert victim in status["error"] and refusal in status["error"], status["error"]
    assert not store.get_many([keys.job_model(job_id), keys.job_result(job_id)]), "a model was written"


def test_with_integrity_mac_on_s3_a_forged_value_bound_to_its_key_is_refused(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    """S3 authenticates its callers, so values are only bound there by default; ``integrity: mac`` adds the MAC."""
    spec, store = storage
    job = make_job(spec, channel_spec("s3", services, integrity="mac"))
    job_id = run_with_forgery(job, negated_with_a_valid_checksum)
    status = get_json(store, keys.job_status(job_id))
    assert status["state"] == "failed" and "authenticated with the job's key" in status["error"], status


def test_an_honest_run_with_the_mac_ends_with_the_model_of_one_without(
    storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    models = []
    for integrity in ("mac", "bound"):
        lam = invoker()
        job_id = start(make_job(spec, channel_spec("redis", services, integrity=integrity)), lam)
        lam.join()
        assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"
        models.append(model(store, job_id))
    np.testing.assert_array_equal(*models)
    mac_events = [e for e in lam.events if e.get("seal_key")]
    assert not mac_events, "a job with bound values only was sent a MAC key"
