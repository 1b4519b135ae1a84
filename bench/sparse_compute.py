"""The sparse compute model against an RCV1-like job's measured compute, at several densities.

Run: ``.venv/bin/python bench/sparse_compute.py [--rows 50000] [--densities 0.0015,0.01,0.05] [--job]``.

Calibrates this machine's sparse step as ``lambdaml calibrate --sparse --features 47236
--batch-size 100`` does (the probe of that very model on 4,000 rows, and the sparse rates per
non-zero, per row and per parameter), then, at each density, predicts the compute of one worker
training logistic regression on ``rows`` RCV1-like rows (``synthetic.rcv1_like``, 47,236 features,
batch 100) in two ways: from that profile (the probe scaled by the rows' non-zeros), and from the
sparse rates alone (what a profile gives a sparse model it has no probe of). Each with its range,
the profile's uncertainty.

Measured in the same run: the worker's steps as the runtime takes them (``epoch_order``,
``batch_indices``, the algorithm's ``step`` on the rows it gathers, through a one-worker
communicator: what a worker of a one-worker job does between its epochs' ends), the median
epoch after the first (the verdict, *in range*, is on it), and the fastest (the one the machine's
other work disturbed least, as the probes take their least time); beside them the ``compute_s``
the worker reports (the gradient and the update only, without the batch's gather and the finite
check and copy around the collective, which the model's compute holds). With ``--job`` also a
real local job of one worker on moto and Redis: its median epoch (rank 0's ``epoch_elapsed_s``)
and reported ``compute_s``.

The rows are drawn with as many words a row as give the density (``rcv1_like`` draws words
from a Zipf-like vocabulary, and a repeated word adds up); where the non-zeros would not fit
in memory at once (density 0.05: 118M), the matrix is ``rcv1_like``'s first rows repeated.
Writes ``bench/results/sparse_compute.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import math
import platform
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from common import bsp_job, report

from analytic_model.prediction import predict_faas
from analytic_model.profile import MeasuredCompute, Profile, SparseCompute, aws_profile, with_figures
from analytic_model.records import to_json
from analytic_model.workload import Workload
from lambdaml.arrays import Array
from lambdaml.calibrate import ComputeProbe, cores
from lambdaml.calibrate.compute import measure_add_Bps, measure_compute, measure_sparse
from lambdaml.data import synthetic
from lambdaml.data.sparse import CSRMatrix

log = logging.getLogger("bench.sparse_compute")

FEATURES = synthetic.RCV1_FEATURES  # 47,236
BATCH = 100
MEMORY_MB = 3008  # any: a local profile's worker computes on its share of the cores
MAX_DRAWS = 30_000_000  # words drawn by one rcv1_like call (about 1.5 GB at its peak)


@dataclass(frozen=True)
class Calibrated:
    """The figures ``lambdaml calibrate --sparse`` measures of a sparse LR step."""

    key: str
    probe: MeasuredCompute
    sparse: SparseCompute
    add_Bps: float

    def profile(self, *, with_probe: bool) -> Profile:
        """A local profile of this machine's compute: the probe and the sparse rates, or the rates alone."""
        compute: dict[str, object] = {"add_Bps": self.add_Bps, "sparse": to_json(self.sparse)}
        if with_probe:
            compute["measured"] = {self.key: to_json(self.probe)}
        changes = {"target": "local", "faas": {"shared_cores": cores()}, "compute": compute}
        return with_figures(aws_profile(), changes, "measured by bench/sparse_compute.py")


def calibrate() -> Calibrated:
    """As ``lambdaml calibrate --sparse --features 47236 --batch-size 100``: its probe (4,000 rows, as
    the command's ``max(4000, 4 * batch)``), and the sparse step's rates."""
    key, probe = measure_compute(ComputeProbe("lr", FEATURES, True, BATCH, rows=max(4000, 4 * BATCH)))
    return Calibrated(key, probe, measure_sparse(), measure_add_Bps())


def words_for(density: float, features: int = FEATURES) -> float:
    """Words a row ``rcv1_like`` must draw for ``density`` of the columns to be non-zero: a row of
    Poisson(w) draws from the vocabulary's frequencies p holds sum(1 - exp(-w p)) distinct words."""
    popularity = 1.0 / (np.arange(features) + 10.0)  # rcv1_like's Zipf-like frequencies
    popularity /= popularity.sum()
    target = density * features
    low, high = 1.0, 1e3 * features
    for _ in range(100):
        mid = math.sqrt(low * high)
        if float(np.sum(1.0 - np.exp(-mid * popularity))) < target:
            low = mid
        else:
            high = mid
    return mid


def dataset(rows: int, density: float) -> tuple[CSRMatrix, Array]:
    """``rows`` RCV1-like rows at about ``density``; where too many to draw at once, the first rows repeated."""
    words = words_for(density)
    block = max(BATCH, min(rows, int(MAX_DRAWS / words)))
    X, y, _ = synthetic.rcv1_like(block, features=FEATURES, nnz_per_row=round(words), seed=1)
    if block == rows:
        return X, y
    copies = math.ceil(rows / block)
    return CSRMatrix.vstack([X] * copies)[:rows], np.tile(y, copies)[:rows]


def predict(profile: Profile, rows: int, nnz_per_row: float) -> tuple[float, str]:
    """(seconds of compute per epoch of one worker, where its rates came from)."""
    workload = Workload(
        "lr", dataset_bytes=1.0, samples=rows, features=FEATURES, sparse=True, nnz_per_row=nnz_per_row,
        batch_size=BATCH, epochs=1.0,
    )  # fmt: skip
    prediction = predict_faas(workload, 1, "redis", "allreduce", MEMORY_MB, profile)
    return prediction.time["compute_s"], prediction.compute_from


def measure_steps(X: CSRMatrix, y: Array, epochs: int) -> tuple[float, float, float]:
    """(median epoch after the first, the fastest, the median of their reported compute_s) of a one-worker
    job's steps, taken as the runtime's worker loop takes them (``runtime.worker._train_epoch``).
    The fastest epoch is the one the machine's other work disturbed least (the probes' estimate)."""
    from lambdaml.algorithms import reify
    from lambdaml.channels import open_channel
    from lambdaml.comm.channel import ChannelCommunicator
    from lambdaml.config import AlgorithmSpec, ChannelSpec, ModelSpec
    from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
    from lambdaml.data.shards import Manifest
    from lambdaml.models import MODELS
    from lambdaml.runtime.heap import keep_freed_buffers

    keep_freed_buffers()  # as a worker process does
    rows = len(y)
    manifest = Manifest(
        name="sparse-compute", shard_rows=[rows], test_rows=0, created=0.0, dataset_version="bench",
        shard_bytes=[0], shard_hashes=[""], n_features=FEATURES, format="csr",
    )  # fmt: skip
    model = MODELS.get("lr").build(ModelSpec(name="lr"), manifest)
    comm = ChannelCommunicator(open_channel(ChannelSpec(kind="memory")), "sparse-compute", 0, 1)
    spec = AlgorithmSpec(name="ga_sgd", lr=0.1, batch_size=BATCH, epochs=epochs)
    state = reify(spec, model, comm, model.init_params(0))
    state.on_start(X, y)
    steps = steps_per_epoch(rows, BATCH)
    walls, computes = [], []
    for epoch in range(epochs):
        order = epoch_order(rows, epoch=epoch, rank=0, seed=spec.seed, shuffle=spec.shuffle)
        before, started = state.compute_s, time.perf_counter()
        for batch in batch_indices(order, BATCH, steps):
            state.step(X[batch], y[batch])
        walls.append(time.perf_counter() - started)
        computes.append(state.compute_s - before)
        state.end_epoch(epoch)
    return statistics.median(walls[1:]), min(walls[1:]), statistics.median(computes[1:])


def measure_job(
    rows: int, X: CSRMatrix, y: Array, epochs: int, storage: Any, channel: Any, store: Any
) -> tuple[float, float]:
    """(median epoch after the first, rank 0's compute_s over all epochs, the first included, per epoch)
    of a real local job of one worker."""
    from lambdaml.data import shards
    from lambdaml.driver import run_job

    name = f"sparse-{uuid.uuid4().hex[:6]}"
    shards.prepare(store, name, X, y, shards=1, test_fraction=0.0)
    job = bsp_job("sparse-compute", 1, name, storage, channel, "lr", {"name": "ga_sgd", "lr": 0.1,
                  "batch_size": BATCH, "epochs": epochs})  # fmt: skip
    result = run_job(job, results_dir=None)
    worker = next(w for w in result.workers if w.rank == 0)
    elapsed = worker.epoch_elapsed_s
    per_epoch = statistics.median(b - a for a, b in itertools.pairwise(elapsed))
    return per_epoch, worker.times.compute_s / epochs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--densities", default="0.0015,0.01,0.05")
    parser.add_argument("--epochs", type=int, default=6, help="epochs measured, the first not timed (default 6)")
    parser.add_argument("--job", action="store_true", help="also run a real local job (moto, Redis) per density")
    args = parser.parse_args(argv)
    densities = [float(d) for d in args.densities.split(",")]
    if args.rows < BATCH or args.epochs < 2 or not all(0 < d <= 1 for d in densities):
        parser.error(f"need --rows >= {BATCH}, --epochs >= 2 and densities in (0, 1]")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)

    started = time.monotonic()
    log.info("calibrating the sparse step (as lambdaml calibrate --sparse --features %d)", FEATURES)
    calibrated = calibrate()
    rates = calibrated.sparse
    log.info(
        "probe: %.1f us a row at %.1f non-zeros, %.1f us a step; rates: %.2f ns a non-zero, %.2f us a row, "
        "%.2f ns a parameter a step, %.1f us a step",
        calibrated.probe.per_sample_s * 1e6, calibrated.probe.nnz_per_row, calibrated.probe.per_step_s * 1e6,
        rates.per_nonzero_s * 1e9, rates.per_row_s * 1e6, rates.per_param_step_s * 1e9, rates.per_step_s * 1e6,
    )  # fmt: skip
    profiles = {"probe": calibrated.profile(with_probe=True), "rates": calibrated.profile(with_probe=False)}
    uncertainty = profiles["probe"].uncertainty

    with contextlib.ExitStack() as stack:
        target: tuple[Any, Any, Any] | None = None
        if args.job:
            from lambdaml.config import ChannelSpec, StorageSpec
            from lambdaml.local import services
            from lambdaml.storage import open_storage

            moto = services.start_moto()
            stack.callback(moto.stop)
            redis = services.start_redis()
            stack.callback(redis.stop)
            storage = StorageSpec(bucket=f"sparse-{uuid.uuid4().hex[:8]}", endpoint_url=moto.url)
            store = open_storage(storage)
            store.ensure()
            target = (storage, ChannelSpec(kind="redis", host="127.0.0.1", port=redis.port), store)
        header = ["density", "nnz/row", "from", "predicted s/epoch", "range", "ms/step", "measured s/epoch", "fastest",
                  "compute_s/epoch", "error", "in range"]  # fmt: skip
        if args.job:
            header += ["job s/epoch", "job compute_s", "job error", "job in range"]
        table: list[list[str]] = []
        for density in densities:
            X, y = dataset(args.rows, density)
            nnz = X.nnz / args.rows
            steps = math.ceil(args.rows / BATCH)
            log.info("[%4.0fs] density %g: %.1f non-zeros a row", time.monotonic() - started, density, nnz)
            measured, fastest, compute_s = measure_steps(X, y, args.epochs)
            job: tuple[float, float] | None = None
            if target is not None:
                job = measure_job(args.rows, X, y, args.epochs, *target)
            for name, profile in profiles.items():
                predicted, source = predict(profile, args.rows, nnz)
                low, high = uncertainty.time_range(predicted)
                error = predicted / measured - 1.0
                row = [f"{X.nnz / args.rows / FEATURES:.4f}", f"{nnz:.0f}", f"{name} ({source})", f"{predicted:.3f}",
                       f"{low:.3f}-{high:.3f}", f"{1e3 * predicted / steps:.3f}", f"{measured:.3f}", f"{fastest:.3f}",
                       f"{compute_s:.3f}",
                       f"{error:+.0%}", "yes" if low <= measured <= high else "NO"]  # fmt: skip
                if job is not None:
                    row += [f"{job[0]:.3f}", f"{job[1]:.3f}", f"{predicted / job[0] - 1.0:+.0%}"]
                    row.append("yes" if low <= job[0] <= high else "NO")
                table.append(row)
                log.info("[%4.0fs]   %s", time.monotonic() - started, " | ".join(row))
            del X, y
    print(f"\n{platform.node()}, {cores()} cores, {args.rows} rows, batch {BATCH}, W = 1; range: the profile's "
          f"uncertainty ({uncertainty.time_fraction:.0%})\n")  # fmt: skip
    report("sparse_compute", header, table)
    for name in profiles:
        mine = [float(r[3]) for r in table if r[2].startswith(name)]
        changes = all(b > a for a, b in itertools.pairwise(mine))
        print(f"{name}: predicted s/epoch {' < '.join(f'{p:.3f}' for p in mine)}: "
              f"{'grows with density' if changes else 'does NOT grow with density'}")  # fmt: skip
    print(f"({time.monotonic() - started:.0f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
