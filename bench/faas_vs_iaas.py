"""FaaS against IaaS on the same job: LR on 1,000,000 Higgs-like rows, 4 workers, 3 epochs.

Run: ``.venv/bin/python bench/faas_vs_iaas.py [--rows N] [--epochs E] [--batch-size B]``.
It starts its own moto, Redis and Memcached on loopback ports, prepares the dataset once,
and trains the identical job (BSP GA-SGD, AllReduce) five ways in one run: the local FaaS
backend (one process per worker, as Lambda runs them) over Redis, over S3, over Memcached
and over direct links (meeting through the Redis), and ``iaas-local`` (torchrun, gloo). It
prints per-epoch time, its breakdown per worker (load, compute, communicate, wait), cost,
final loss and the ratios against the gloo run, and writes ``bench/results/faas_vs_iaas.{csv,png}`` (the PNG is the
``lambdaml compare`` plot: loss against time and against dollars).

Everything shares this machine's cores, so the figures compare the transports and the
software around them, not Lambda's or EC2's hardware; the cost columns price the same
run time at Lambda and EC2 rates.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from typing import Any

from common import RESULTS, report

from lambdaml.cli.compare import plot_comparison, summary
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.local import services
from lambdaml.storage import open_storage

log = logging.getLogger("bench.faas_vs_iaas")
WORKERS = 4


def job_for(storage: StorageSpec, channel: dict[str, Any], args: argparse.Namespace) -> JobSpec:
    return parse_job(
        {
            "name": "faas-vs-iaas",
            "workers": WORKERS,
            "dataset": "higgs-bench",
            "storage": storage.model_dump(),
            "channel": channel,
            "model": {"name": "lr"},
            "algorithm": {
                "name": "ga_sgd",
                "lr": 0.1,
                "batch_size": args.batch_size,
                "epochs": args.epochs,
                "seed": 0,
            },
            "sync": {"protocol": "bsp", "pattern": "allreduce", "timeout_s": 300},
            "iaas": {"instance_type": args.instance_type},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1000, help="rows per worker per step")
    parser.add_argument("--instance-type", default="c5.large", help="EC2 type the iaas run is priced as")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    moto, redis, memcached = services.start_moto(), services.start_redis(), services.start_memcached()
    with services.running(moto, redis, memcached), tempfile.TemporaryDirectory() as results_dir:
        storage = StorageSpec(bucket="bench-data", endpoint_url=moto.url)
        store = open_storage(storage)
        store.ensure()
        started = time.perf_counter()
        X, y, _ = synthetic.higgs_like(args.rows, seed=0)
        shards.prepare(store, "higgs-bench", X, y, shards=WORKERS, test_fraction=0.1, seed=0)
        print(f"prepared {args.rows:,} rows x {X.shape[1]} features in {time.perf_counter() - started:.1f}s")

        runs = [
            ("local", {"kind": "redis", "port": redis.port}),
            ("local", {"kind": "s3", "bucket": "bench-comm", "endpoint_url": moto.url}),
            ("local", {"kind": "memcached", "port": memcached.port}),
            ("local", {"kind": "direct", "rendezvous": {"kind": "redis", "port": redis.port}}),
            ("iaas-local", {"kind": "redis", "port": redis.port}),  # the channel is unused: gloo
        ]
        results = []
        for backend, channel in runs:
            job = job_for(storage, channel, args)
            result = run_job(job, backend=backend, results_dir=results_dir)
            results.append(result)
            print(f"  {summary(result).label}: {result.wall_time_s:.1f}s")

    rows = [summary(r) for r in results]
    base = rows[-1]  # the gloo run
    header = ["run", "s/epoch", "load", "compute", "comm", "wait", "$", "time x gloo", "cost x gloo", "loss", "acc"]
    table = [
        [
            row.label,
            f"{row.epoch_s:.2f}",
            *(f"{row.breakdown[k]:.2f}" for k in ("load_s", "compute_s", "communicate_s", "wait_s")),
            f"{row.dollars:.6f}",
            f"{row.epoch_s / base.epoch_s:.2f}",
            f"{row.dollars / base.dollars:.3f}",
            f"{row.loss:.5f}",
            f"{row.accuracy:.4f}",
        ]
        for row in rows
    ]
    print(f"\nLR, {args.rows:,} rows, {WORKERS} workers, {args.epochs} epochs, batch {args.batch_size}/worker")
    path = report("faas_vs_iaas", header, table)
    plot = plot_comparison(results, RESULTS / "faas_vs_iaas.png")
    print(f"\nwrote {path} and {plot}")


if __name__ == "__main__":
    main()
