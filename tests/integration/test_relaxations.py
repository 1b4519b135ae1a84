"""Communication relaxations end to end: compression with error feedback, 1-bit Adam and
decentralized training, as jobs from job files, against references computed here.

- With the identity compressor every method equals its uncompressed counterpart.
- D-PSGD and 1-bit Adam equal single-process simulations of their update rules.
- 1-bit moves at least 25x fewer bytes than fp32 for d >= 1e6, counted by a Redis channel.
- 1-bit EF-SGD and 1-bit Adam end within 1% of the uncompressed loss (LR and an MLP), and
  DCD, ECD and CHOCO with 8-bit compression converge on LR like D-PSGD.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from lambdaml import codec, keys
from lambdaml.channels import Channel, open_channel
from lambdaml.channels.memory import MemoryChannel
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.compressed import CompressedAllreduce
from lambdaml.compression.compressors import OneBit
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
from lambdaml.driver import run_job
from lambdaml.models.linear import LogisticRegression
from lambdaml.runtime.reports import JobResult, WorkerReport
from lambdaml.runtime.worker import Lifetime, run_worker
from tests.helpers import Services, channel_spec, first_attempt, unique_name

pytestmark = pytest.mark.timeout(300)

WORKERS = 4


@pytest.fixture(scope="module")
def store(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    spec, channel = data_store
    X, y, _ = synthetic.higgs_like(1003, seed=3)  # uneven shards: the last batches differ in size
    shards.prepare(channel, "small", X, y, shards=WORKERS, test_fraction=0.2, seed=1)
    X, y, _ = synthetic.higgs_like(4000, seed=5)
    shards.prepare(channel, "higgs", X, y, shards=WORKERS)
    return spec, channel


def job(storage: StorageSpec, dataset: str, algorithm: dict[str, Any], **sections: Any) -> JobSpec:
    return parse_job(
        {
            "name": "relax",
            "workers": WORKERS,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": {"kind": "memory"},
            "model": {"name": "lr", "l2": 1e-3},
            "algorithm": {"seed": 1, **algorithm},
            "sync": {"timeout_s": 60},
            **sections,
        }
    )


def run(storage: tuple[StorageSpec, Channel], dataset: str, algorithm: dict[str, Any], **sections: Any) -> Any:
    """Run a job; return its result and final model."""
    result = run_job(job(storage[0], dataset, algorithm, **sections), results_dir=None)
    model = codec.decode_bundle(storage[1].get(keys.job_model(result.job_id)))["params"]
    return result, model


def final_loss(result: JobResult) -> float:
    return float(result.loss_curve[-1].loss)


# --- identity compression == the uncompressed counterpart ----------------------------------

SMALL = {"epochs": 2, "batch_size": 25, "lr": 0.4}  # 9 steps per epoch; two workers' last batch is empty


@pytest.mark.parametrize(
    ("name", "pattern", "exact"),
    # (AllReduce's compressed form is checked bit for bit in tests/unit/test_compress_comm.py.)
    [("ga_sgd", "scatter_reduce", True), ("ma_sgd", "allreduce", False)],
)
def test_identity_compression_equals_the_uncompressed_job(
    name: str, pattern: str, exact: bool, store: tuple[StorageSpec, Channel]
) -> None:
    sync = {"timeout_s": 60, "pattern": pattern}
    plain, plain_model = run(store, "small", {"name": name, **SMALL}, sync=sync)
    ident, ident_model = run(store, "small", {"name": name, **SMALL, "compression": {"name": "identity"}}, sync=sync)
    assert ident.ranks_agree and np.abs(plain_model).max() > 0.1
    if exact:  # GA-SGD: the same rank-order sums, bit for bit
        np.testing.assert_array_equal(ident_model, plain_model)
        assert [p.loss for p in ident.loss_curve] == [p.loss for p in plain.loss_curve]
    else:  # MA-SGD averages x + mean(x_i - x) instead of mean(x_i): equal up to rounding
        np.testing.assert_allclose(ident_model, plain_model, rtol=0, atol=1e-12)


def test_onebit_adam_warmup_is_plain_adam(store: tuple[StorageSpec, Channel]) -> None:
    adam, adam_model = run(store, "small", {"name": "ga_sgd", **SMALL, "lr": 0.05, "optimizer": "adam"})
    warm, warm_model = run(store, "small", {"name": "onebit_adam", **SMALL, "lr": 0.05, "warmup_steps": 10_000})
    np.testing.assert_array_equal(warm_model, adam_model)
    assert final_loss(warm) == final_loss(adam)


def worker_batches(storage: Channel, dataset: str, spec: JobSpec) -> Iterator[list[tuple[np.ndarray, np.ndarray]]]:
    """Per step, each worker's batch, exactly as the workers take them."""
    manifest = shards.read_manifest(storage, dataset)
    data = [shards.load_worker_data(storage, manifest, r, WORKERS) for r in range(WORKERS)]
    batch = spec.algorithm.batch_size
    steps = steps_per_epoch(max(len(y) for _, y in data), batch)
    for epoch in range(spec.algorithm.epochs):
        orders = [
            list(batch_indices(epoch_order(len(y), epoch=epoch, rank=r, seed=1, shuffle=True), batch, steps))
            for r, (_, y) in enumerate(data)
        ]
        for step in range(steps):
            yield [(X[orders[r][step]], y[orders[r][step]]) for r, (X, y) in enumerate(data)]


def grad_sum(model: LogisticRegression, x: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The gradient summed over a batch; zero for an empty one (a worker whose shard ran out)."""
    return model.loss_grad_sum(x, X, y)[1] if len(y) else np.zeros_like(x)


def test_onebit_adam_with_identity_equals_its_update_rule(store: tuple[StorageSpec, Channel]) -> None:
    """Adam on averaged gradients for T_w steps; then v frozen and the workers' momenta averaged."""
    algorithm = {"name": "onebit_adam", **SMALL, "lr": 0.05, "warmup_steps": 12, "compression": {"name": "identity"}}
    result, distributed = run(store, "small", algorithm)

    spec = job(store[0], "small", algorithm)
    model = LogisticRegression(distributed.size - 1, l2=1e-3)
    x = model.init_params(1)
    m, v, t, frozen = np.zeros_like(x), np.zeros_like(x), 0, None
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 0.05
    for step in worker_batches(store[1], "small", spec):
        grads = [grad_sum(model, x, X, y) for X, y in step]
        counts = [len(y) for _, y in step]
        if frozen is None:
            g = np.sum(grads, axis=0) / sum(counts) + model.regularizer_grad(x)
            t += 1
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            x = x - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
            if t == 12:
                frozen = v / (1 - b2**t)
        else:
            own = [
                b1 * m + (1 - b1) * (grad_sum(model, x, X, y) / max(len(y), 1) + model.regularizer_grad(x))
                for X, y in step
            ]
            m = np.where(frozen > 0, np.mean(own, axis=0), 0.0)
            x = x - lr * m / (np.sqrt(frozen) + eps)
    assert frozen is not None and result.ranks_agree
    np.testing.assert_allclose(distributed, x, rtol=0, atol=1e-9)


@pytest.fixture(scope="module")
def dpsgd(store: tuple[StorageSpec, Channel]) -> tuple[JobResult, np.ndarray]:
    result, model = run(store, "small", {"name": "dpsgd", **SMALL})
    return result, model


def test_dpsgd_equals_its_update_rule_on_a_ring(
    store: tuple[StorageSpec, Channel], dpsgd: tuple[JobResult, np.ndarray]
) -> None:
    """x_i <- mean(x_{i-1}, x_i, x_{i+1}) - lr g_i, every worker on its own model; the result is the average."""
    spec = job(store[0], "small", {"name": "dpsgd", **SMALL})
    model = LogisticRegression(dpsgd[1].size - 1, l2=1e-3)
    xs = [model.init_params(1) for _ in range(WORKERS)]
    for step in worker_batches(store[1], "small", spec):
        grads = [
            grad_sum(model, xs[r], X, y) / max(len(y), 1) + model.regularizer_grad(xs[r])
            for r, (X, y) in enumerate(step)
        ]
        xs = [(xs[r - 1] + xs[r] + xs[(r + 1) % WORKERS]) / 3 - 0.4 * grads[r] for r in range(WORKERS)]
    assert np.max(np.abs(xs[0] - xs[2])) > 1e-6, "the workers' models differ until the final average"
    np.testing.assert_allclose(dpsgd[1], np.mean(xs, axis=0), rtol=0, atol=1e-10)
    assert dpsgd[0].ranks_agree


@pytest.mark.parametrize("name", ["dcd_psgd", "ecd_psgd", "choco_sgd"])
def test_compressed_ring_methods_with_identity_are_dpsgd(
    name: str, store: tuple[StorageSpec, Channel], dpsgd: tuple[JobResult, np.ndarray]
) -> None:
    algorithm = {"name": name, **SMALL, "gamma": 1.0, "compression": {"name": "identity"}}
    _, model = run(store, "small", algorithm)
    np.testing.assert_allclose(model, dpsgd[1], rtol=0, atol=1e-9)


# --- checkpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "ga_sgd", "compression": {"name": "onebit"}},
        {"name": "choco_sgd", "gamma": 0.5, "compression": {"name": "qsgd", "levels": 8}},
    ],
    ids=["ef_sgd", "choco_qsgd"],
)
def test_a_worker_killed_mid_job_resumes_from_its_checkpoint_to_the_same_model(
    algorithm: dict[str, Any], store: tuple[StorageSpec, Channel]
) -> None:
    """Error-feedback memories, replicas and random streams are checkpointed: replaying rounds is exact."""
    spec = job(store[0], "small", {**SMALL, **algorithm}, runtime={"checkpoint_every": 4, "margin_s": 0})
    _, reference = run(store, "small", {**SMALL, **algorithm})
    shared, job_id = MemoryChannel(), unique_name("resume")
    attempt = first_attempt(store[1], spec, job_id)

    def rank_main(rank: int) -> WorkerReport:
        calls = itertools.count(1)  # the worker asks for its remaining time before every step

        def remaining_s() -> float:
            if rank == 1 and next(calls) == 7:
                raise RuntimeError("killed")  # after round 6; its last checkpoint is at round 4
            return 900.0

        while True:
            lifetime = Lifetime(remaining_s=remaining_s, margin_s=0, checkpoint_every=4)
            try:
                report = run_worker(spec, attempt, rank, channel=shared, store=store[1], lifetime=lifetime)
            except RuntimeError:
                continue  # AWS retries the invocation; it resumes from the checkpoint
            if isinstance(report, WorkerReport):  # done, not continued
                return report

    with ThreadPoolExecutor(WORKERS) as pool:
        reports = list(pool.map(rank_main, range(WORKERS)))
    assert reports[1].invocations == 2 and reports[0].invocations == 1
    resumed = codec.decode_bundle(store[1].get(keys.job_model(job_id)))["params"]
    np.testing.assert_array_equal(resumed, reference)


# --- bytes on the channel --------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["scatter_reduce", "allreduce"])
def test_onebit_sends_25x_fewer_bytes_per_round_than_fp32(services: Services, pattern: str) -> None:
    d, rounds = 1_000_000, 2
    spec = channel_spec("redis", services)
    channels = [open_channel(spec) for _ in range(WORKERS)]
    rng = np.random.default_rng(0)
    gradients = [rng.standard_normal(d).astype(np.float32) for _ in range(WORKERS)]

    job_ids = {False: unique_name("fp32"), True: unique_name("onebit")}

    def sent_per_round(rank: int, compressed: bool) -> float:
        comm = ChannelCommunicator(channels[rank], job_ids[compressed], rank, WORKERS, pattern=pattern)
        reducer = CompressedAllreduce(
            OneBit(), rank=rank, world=WORKERS, scatter=pattern == "scatter_reduce", error_feedback=True
        )
        before = channels[rank].stats.bytes_sent
        for _ in range(rounds):
            if compressed:
                reducer.allreduce(comm, gradients[rank])
            else:
                comm.allreduce(gradients[rank])
        sent = (channels[rank].stats.bytes_sent - before) / rounds
        comm.finish()
        return sent

    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            fp32 = list(pool.map(lambda r: sent_per_round(r, False), range(WORKERS)))
            onebit = list(pool.map(lambda r: sent_per_round(r, True), range(WORKERS)))
    finally:
        for channel in channels:
            channel.close()
    assert sum(fp32) / sum(onebit) >= 25
    for rank in range(WORKERS):
        if fp32[rank] > 0:  # under AllReduce every rank sends: its vector, or (rank 0) the sum
            assert fp32[rank] / onebit[rank] >= 25, f"rank {rank}: {fp32[rank]:.0f} vs {onebit[rank]:.0f} bytes"


# --- convergence: compressed vs uncompressed, measured here ------------------------------------


def assert_close_to(compressed: JobResult, uncompressed: JobResult) -> None:
    """Compression costs at most 1% of final loss and 1 point of test accuracy.

    One-sided: ending lower is no failure. (Across seeds, the MLP's final mini-batch loss
    moves by about 1% either way, compressed or not; with these seeds both runs of every
    pair here end within 1% of each other.)
    """
    assert final_loss(compressed) <= 1.01 * final_loss(uncompressed)
    assert compressed.test_accuracy >= uncompressed.test_accuracy - 0.01


LR_SGD = {"epochs": 5, "batch_size": 50, "lr": 0.3}
LR_ADAM = {"epochs": 5, "batch_size": 50, "lr": 0.05}


def test_onebit_ef_sgd_and_onebit_adam_match_uncompressed_on_lr(store: tuple[StorageSpec, Channel]) -> None:
    sync = {"timeout_s": 60, "pattern": "scatter_reduce"}
    sgd, _ = run(store, "higgs", {"name": "ga_sgd", **LR_SGD}, sync=sync)
    ef, _ = run(store, "higgs", {"name": "ga_sgd", **LR_SGD, "compression": {"name": "onebit"}}, sync=sync)
    adam, _ = run(store, "higgs", {"name": "ga_sgd", **LR_ADAM, "optimizer": "adam"}, sync=sync)
    onebit_adam, _ = run(store, "higgs", {"name": "onebit_adam", **LR_ADAM, "warmup_steps": 40}, sync=sync)
    assert final_loss(sgd) < 0.3 and sgd.test_accuracy > 0.85, "the reference itself learned"
    assert_close_to(ef, sgd)
    assert_close_to(onebit_adam, adam)
    # Every worker's result counts its rounds (one per step) and what each round sent. (With 29
    # parameters the codec's headers outweigh the floats; the bytes test above has d = 1e6.)
    steps = 5 * 16
    for compressed, plain in ((ef, sgd), (onebit_adam, adam)):
        for worker, reference in zip(compressed.workers, plain.workers, strict=True):
            channel = worker.channel
            assert channel.per_round.rounds == reference.channel.per_round.rounds == steps
            assert channel.per_round.bytes_sent_per_round == pytest.approx(channel.bytes_sent / steps)
            assert channel.per_round.requests_per_round == pytest.approx(channel.requests / steps)


def test_onebit_ef_sgd_and_onebit_adam_match_uncompressed_on_an_mlp(store: tuple[StorageSpec, Channel]) -> None:
    builtin = pytest.importorskip("lambdaml.data.builtin")
    pytest.importorskip("torch")
    X, y, shape = builtin.load_builtin("digits")
    shards.prepare(store[1], "digits", X, y, shards=WORKERS, test_fraction=0.2, sample_shape=shape)
    sections = {
        "model": {"name": "mlp", "hidden": [32], "l2": 0.01},
        "sync": {"timeout_s": 60, "pattern": "scatter_reduce"},
    }
    sgd = {"name": "ga_sgd", "epochs": 40, "batch_size": 90, "lr": 0.03, "optimizer": "momentum"}
    adam = {"name": "ga_sgd", "epochs": 40, "batch_size": 90, "lr": 0.01, "optimizer": "adam"}
    onebit = {"compression": {"name": "onebit"}}
    results = {
        "sgd": run(store, "digits", sgd, **sections)[0],
        "ef": run(store, "digits", {**sgd, **onebit}, **sections)[0],
        "adam": run(store, "digits", adam, **sections)[0],
        "onebit_adam": run(store, "digits", {**adam, "name": "onebit_adam", "warmup_steps": 60}, **sections)[0],
    }
    assert results["sgd"].test_accuracy > 0.93 and results["adam"].test_accuracy > 0.93, "the references learned"
    assert_close_to(results["ef"], results["sgd"])
    assert_close_to(results["onebit_adam"], results["adam"])


def test_dcd_ecd_and_choco_with_8_bits_converge_on_lr(
    store: tuple[StorageSpec, Channel],
) -> None:
    dpsgd, _ = run(store, "higgs", {"name": "dpsgd", **LR_SGD})
    assert final_loss(dpsgd) < 0.3 and dpsgd.ranks_agree
    for name in ("dcd_psgd", "ecd_psgd", "choco_sgd"):
        result, _ = run(store, "higgs", {"name": name, **LR_SGD, "gamma": 1.0, "compression": {"name": "uint8"}})
        assert final_loss(result) == pytest.approx(final_loss(dpsgd), rel=0.01), name
        assert abs(result.test_accuracy - dpsgd.test_accuracy) <= 0.01, name
        # 8-bit messages: a ring round sends a quarter of D-PSGD's float64 model, plus headers.
        assert (
            result.workers[1].channel.per_round.bytes_sent_per_round
            < dpsgd.workers[1].channel.per_round.bytes_sent_per_round
        )
