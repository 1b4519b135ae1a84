"""The first job end to end: BSP GA-SGD for LR over every channel, against references."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from analytic_model import load_profile
from analytic_model.pattern_choice import candidates, choose_pattern
from lambdaml import codec, keys, settings
from lambdaml.channels import Channel, open_channel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
from lambdaml.driver import run_job
from lambdaml.models.linear import LogisticRegression
from tests.helpers import Services, channel_spec, single_process_sgd, unsure_profile

WORKERS = 4


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    return data_store


def make_job(storage: StorageSpec, channel: Any, dataset: str, **algorithm: Any) -> JobSpec:
    l2 = algorithm.pop("l2", 0.0)
    return parse_job(
        {
            "name": "it",
            "workers": WORKERS,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": channel.model_dump(),
            "model": {"name": "lr", "l2": l2},
            "algorithm": {"name": "ga_sgd", "seed": 7, **algorithm},
            "sync": {"timeout_s": 60},
        }
    )


def load_model(store: Channel, job_id: str) -> np.ndarray:
    return codec.decode_bundle(store.get(keys.job_model(job_id)))["params"]


@pytest.fixture(scope="module")
def uneven_dataset(storage: tuple[StorageSpec, Channel]) -> shards.Manifest:
    # 1,922 training rows: shards of 481, 481, 480, 480, so the last step's batches are unequal.
    X, y, _ = synthetic.higgs_like(2403, seed=3)
    return shards.prepare(storage[1], "equiv", X, y, shards=WORKERS, test_fraction=0.2, seed=1)


@pytest.mark.parametrize("kind", ["s3", "redis", "memcached", "dynamodb", "memory"])
def test_bsp_ga_sgd_equals_single_process_sgd(
    kind: str, services: Services, storage: tuple[StorageSpec, Channel], uneven_dataset: shards.Manifest, tmp_path: Any
) -> None:
    spec, store = storage
    job = make_job(spec, channel_spec(kind, services), "equiv", epochs=2, batch_size=40, lr=0.5, l2=1e-3)
    result = run_job(job, results_dir=tmp_path)

    distributed = load_model(store, result.job_id)
    reference = single_process_sgd(store, uneven_dataset, job)
    assert result.ranks_agree, "every rank must end with the identical model under BSP"
    assert np.max(np.abs(distributed - reference)) <= 1e-5
    # sync.pattern auto (the default): every rank ran what the cost model predicts fastest here.
    if kind == "memory":
        assert (result.pattern, result.predicted_round_s) == ("allreduce", None)
    else:
        choice = choose_pattern(
            load_profile(), kind, WORKERS, distributed.nbytes, candidates(WORKERS, compressed=False),
            authenticated=job.channel.authenticates_values,  # Redis and Memcached here: no password, MACed values
        )  # fmt: skip
        contenders = choice.contenders(load_profile().uncertainty)
        if len(contenders) > 1:  # the model cannot tell them apart: the job timed them, and kept one
            assert result.pattern in contenders and set(result.trial_round_s or {}) == set(contenders)
        else:
            assert (result.pattern, result.trial_round_s) == (choice.pattern, None)
        assert result.predicted_round_s == choice.predictions[result.pattern] > 0
    assert [p.epoch for p in result.loss_curve] == [1, 2]
    assert result.loss_curve[1].loss < result.loss_curve[0].loss
    for worker in result.workers:
        assert worker.times.total_s >= worker.times.load_s + worker.times.compute_s
        assert worker.channel.puts > 0
    # The job leaves nothing of itself on the channel.
    if kind != "memory":  # the in-memory channel lives and dies with the job
        with open_channel(job.channel) as channel:
            assert channel.list(keys.comm_prefix(result.job_id)) == []


def test_a_job_whose_model_cannot_pick_a_pattern_times_them_all_and_trains_the_same_model(
    services: Services,
    storage: tuple[StorageSpec, Channel],
    uneven_dataset: shards.Manifest,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A profile unsure of every prediction: at W = 4 all three patterns contend.
    monkeypatch.setenv(settings.ENV_PROFILE, str(unsure_profile(tmp_path)))
    spec, store = storage
    job = make_job(spec, channel_spec("redis", services), "equiv", epochs=2, batch_size=40, lr=0.5, l2=1e-3)
    result = run_job(job, results_dir=tmp_path)

    everything = set(candidates(WORKERS, compressed=False))
    assert result.pattern in everything and set(result.trial_round_s or {}) == everything
    assert result.ranks_agree
    reference = single_process_sgd(store, uneven_dataset, job)
    assert np.max(np.abs(load_model(store, result.job_id) - reference)) <= 1e-5
    with open_channel(job.channel) as channel:
        assert channel.list(keys.comm_prefix(result.job_id)) == []


def test_four_workers_match_single_process_accuracy(
    services: Services, storage: tuple[StorageSpec, Channel], tmp_path: Any
) -> None:
    spec, store = storage
    X, y, _ = synthetic.higgs_like(20_000, seed=11)
    manifest = shards.prepare(store, "higgs-acc", X, y, shards=WORKERS, test_fraction=0.2, seed=2)
    job = make_job(spec, channel_spec("redis", services), "higgs-acc", epochs=3, batch_size=50, lr=0.2)
    result = run_job(job, results_dir=tmp_path)

    # Single process, same epochs, same batch size, over all training rows.
    train = [shards.load_worker_data(store, manifest, r, WORKERS) for r in range(WORKERS)]
    X_train = np.concatenate([X for X, _ in train])
    y_train = np.concatenate([y for _, y in train])
    model = LogisticRegression(manifest.n_features)
    params = model.init_params(0)
    for epoch in range(3):
        order = epoch_order(len(y_train), epoch=epoch, rank=0, seed=0, shuffle=True)
        for rows in batch_indices(order, 50, steps_per_epoch(len(y_train), 50)):
            _, grad = model.loss_grad_sum(params, X_train[rows], y_train[rows])
            params -= 0.2 * grad / len(rows)
    test = shards.load_test(store, manifest)
    assert test is not None
    single_accuracy = model.accuracy(params, *test)

    assert single_accuracy > 0.8, "the reference itself must have learned"
    assert abs(result.test_accuracy - single_accuracy) <= 0.01
    # Result JSON is in S3 as well as on disk.
    assert (tmp_path / f"{result.job_id}.json").exists()
    assert store.get(keys.job_result(result.job_id))
