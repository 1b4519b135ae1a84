"""What a worker really holds: peak resident memory of real local workers against the size of their shard.

Run: ``.venv/bin/python bench/worker_memory.py [--quick]``. It starts moto and Redis on
loopback ports, prepares Higgs-like datasets (dense float32 shards) whose shard per worker
is each of ``--sizes`` MiB, trains GA-SGD on each with the local backend (W worker
processes, as on Lambda) over Redis, once per model of ``--models`` (``lr``: the numpy
runtime; ``mlp``: torch), and reads every worker's peak RSS from its report (/proc's VmHWM).
It fits ``peak = runtime + factor x shard`` by least squares per model (what
``lambda.runtime_memory_mb`` and ``lambda.data_memory_factor`` in the shipped defaults hold),
prints the table and the fits next to the figures they replaced (300 MiB + 2.0 x shard, the
reference), and writes ``bench/results/worker_memory.csv`` and ``worker_memory.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import uuid

from common import RESULTS, bsp_job, report

from lambdaml.config import ChannelSpec, StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.local import services
from lambdaml.storage import open_storage

log = logging.getLogger("bench.worker_memory")

MIB = 1024 * 1024
WORKERS = 2
BATCH = 10_000  # large batches: few rounds, so a run is seconds of training and the memory is the data's
ROW_BYTES = (synthetic.HIGGS_FEATURES + 1) * 4  # float32 features and label
RUNTIMES = {"lr": "numpy", "mlp": "torch"}  # the runtime a model's workers import
# The figures the fit replaced (one assumption for every runtime): the reference of the table.
PREVIOUS_RUNTIME_MB, PREVIOUS_FACTOR = 300.0, 2.0


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of ys against xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def measure(storage: StorageSpec, channel: ChannelSpec, dataset: str, model: str) -> tuple[list[float], list[float]]:
    """(shard MiB, peak RSS MiB) of every worker of one real run."""
    algorithm = {"name": "ga_sgd", "lr": 0.1, "batch_size": BATCH, "epochs": 1}
    job = bsp_job("mem", WORKERS, dataset, storage, channel, model, algorithm)
    result = run_job(job, results_dir=None)
    manifest = shards.read_manifest(open_storage(storage), dataset)
    shard_mib = [manifest.shard_bytes[w.rank] / MIB for w in result.workers]
    return shard_mib, [w.memory.peak_rss_mb for w in result.workers]


def plot(fits: dict[str, tuple[list[tuple[float, float]], float, float]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4.5))
    top = max(p[0] for points, _, _ in fits.values() for p in points) * 1.1
    for model, (points, intercept, factor) in fits.items():
        ax.scatter([p[0] for p in points], [p[1] for p in points], label=f"{model} workers")
        fitted = f"{model}: {intercept:.0f} + {factor:.2f} x shard"
        ax.plot([0, top], [intercept, intercept + factor * top], "-", label=fitted)
    previous = [PREVIOUS_RUNTIME_MB, PREVIOUS_RUNTIME_MB + PREVIOUS_FACTOR * top]
    ax.plot([0, top], previous, "k--", label="previous defaults")
    ax.set_xlabel("binary shard per worker (MiB)")
    ax.set_ylabel("peak RSS (MiB)")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.savefig(RESULTS / "worker_memory.png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--sizes", default="10,40,80,160", help="shard MiB per worker (default: %(default)s)")
    parser.add_argument("--models", default="lr,mlp", help="lr (numpy), mlp (torch) (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="shards of 10, 20 and 40 MiB")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    sizes = [10.0, 20.0, 40.0] if args.quick else [float(s) for s in args.sizes.split(",")]
    models = args.models.split(",")
    if len(sizes) < 2 or min(sizes) <= 0 or set(models) - set(RUNTIMES):
        parser.error("--sizes needs at least two positive sizes, --models names among " + ",".join(RUNTIMES))

    measured: dict[str, list[tuple[float, float]]] = {model: [] for model in models}
    with contextlib.ExitStack() as stack:
        moto = services.start_moto()
        stack.callback(moto.stop)
        redis = services.start_redis()
        stack.callback(redis.stop)
        token = uuid.uuid4().hex[:8]
        storage = StorageSpec(bucket=f"mem-data-{token}", endpoint_url=moto.url)
        channel = ChannelSpec(kind="redis", host="127.0.0.1", port=redis.port)
        store = open_storage(storage)
        store.ensure()
        for size in sizes:
            rows = int(size * MIB / ROW_BYTES) * WORKERS
            X, y, _ = synthetic.higgs_like(rows, seed=1)
            name = f"mem-{int(size)}"
            shards.prepare(store, name, X, y, shards=WORKERS, test_fraction=0.0)
            del X, y
            for model in models:
                shard_mib, peaks = measure(storage, channel, name, model)
                measured[model].extend(zip(shard_mib, peaks, strict=True))
            shards.remove(store, name)  # moto holds every byte in memory
    fits: dict[str, tuple[list[tuple[float, float]], float, float]] = {}
    rows_out = []
    for model, points in measured.items():
        intercept, factor = fit([p[0] for p in points], [p[1] for p in points])
        fits[model] = (points, intercept, factor)
        for shard, peak in points:
            fitted, before = intercept + factor * shard, PREVIOUS_RUNTIME_MB + PREVIOUS_FACTOR * shard
            rows_out.append([model, f"{shard:.1f}", f"{peak:.0f}", f"{fitted:.0f}", f"{before:.0f}"])
    header = ["model", "shard MiB", "peak RSS MiB", "fit MiB", "previous defaults MiB"]
    report("worker_memory", header, rows_out)
    print()
    for model, (points, intercept, factor) in fits.items():
        residual = max(abs(peak - (intercept + factor * shard)) / peak for shard, peak in points)
        print(
            f"{model} ({RUNTIMES[model]}) over {len(points)} workers: peak RSS = {intercept:.0f} MiB + "
            f"{factor:.2f} x shard (largest residual {residual:.1%})"
        )
    print(f"previous defaults: {PREVIOUS_RUNTIME_MB:.0f} MiB + {PREVIOUS_FACTOR:.2f} x shard, for every runtime")
    plot(fits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
