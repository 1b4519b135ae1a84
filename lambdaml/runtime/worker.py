"""The worker core: one rank's whole training run, the same on every backend.

Backends (local processes, Lambda, the local Lambda service) differ only in how they
start this function and carry its report back.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from lambdaml import codec, keys
from lambdaml.algorithms import reify
from lambdaml.channels import Channel, open_channel
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.config import JobSpec
from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
from lambdaml.data.shards import load_test, load_worker_data, read_manifest
from lambdaml.errors import JobFailed
from lambdaml.models import MODELS
from lambdaml.storage import open_storage

log = logging.getLogger(__name__)

#: Called after every epoch with (rank, epoch, mean loss, seconds since start).
EpochCallback = Callable[[int, int, float, float], None]


def params_checksum(params: np.ndarray) -> str:
    """A short fingerprint of a model, to check that every rank ends with the same one."""
    return f"{zlib.crc32(np.ascontiguousarray(params).tobytes()):08x}"


def run_worker(
    job: JobSpec,
    job_id: str,
    rank: int,
    *,
    on_epoch: EpochCallback | None = None,
    channel: Channel | None = None,
    store: Channel | None = None,
) -> dict[str, Any]:
    """Train one rank to the end and return its report (times, losses, traffic)."""
    started = time.perf_counter()
    store = store or open_storage(job.storage)
    manifest = read_manifest(store, job.dataset)
    X, y = load_worker_data(store, manifest, rank, job.workers)
    load_s = time.perf_counter() - started

    model = MODELS.get(job.model.name).build(job.model, manifest)
    channel = channel or open_channel(job.channel)
    comm = ChannelCommunicator(
        channel, job_id, rank, job.workers, pattern=job.sync.pattern, timeout_s=job.sync.timeout_s
    )
    spec = job.algorithm
    state = reify(spec, model, comm, model.init_params(spec.seed), job.sync)
    state.on_start(X, y)
    largest_shard = max(manifest.rows_of_worker(r, job.workers) for r in range(job.workers))
    steps = steps_per_epoch(largest_shard, spec.batch_size)

    losses: list[float] = []
    elapsed: list[float] = []
    for epoch in range(spec.epochs):
        order = epoch_order(len(y), epoch=epoch, rank=rank, seed=spec.seed, shuffle=spec.shuffle)
        for rows in batch_indices(order, spec.batch_size, steps):
            state.step(X[rows], y[rows])
        loss = float(state.end_epoch(epoch))
        if not math.isfinite(loss):
            raise JobFailed(f"training diverged in epoch {epoch + 1} (loss {loss}); try a smaller learning rate")
        losses.append(loss)
        elapsed.append(time.perf_counter() - started)
        if on_epoch is not None:
            on_epoch(rank, epoch + 1, loss, elapsed[-1])
    state.finish()
    params = state.final_params()
    report: dict[str, Any] = {
        "rank": rank,
        "losses": losses,
        "epoch_elapsed_s": elapsed,
        "model_checksum": params_checksum(params),
        "rows": len(y),
        "steps_per_epoch": steps,
    }
    if state.asynchronous is not None:
        report["async"] = state.asynchronous.stats()
    comm.finish()

    if rank == 0:
        model_key = keys.job_model(job_id)
        store.put(model_key, codec.encode_bundle({"params": params}))
        report["model_uri"] = f"s3://{job.storage.bucket}/{model_key}"
        test = load_test(store, manifest)
        if test is not None:
            report["test_loss"] = model.mean_loss(params, *test)
            if model.supervised:
                report["test_accuracy"] = model.accuracy(params, *test)
    total_s = time.perf_counter() - started
    wait_s = comm.wait_s
    report["times"] = {
        "load_s": load_s,
        "compute_s": state.compute_s,
        "communicate_s": max(comm.comm_s - wait_s, 0.0),
        "wait_s": wait_s,
        "total_s": total_s,
    }
    report["channel"] = comm.stats()
    return report
