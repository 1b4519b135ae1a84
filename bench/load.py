"""Load: 32 local workers for 200 BSP rounds on Redis and on S3, checked and timed.

Run: ``.venv/bin/python bench/load.py [--workers 32] [--rounds 200] [--channels redis,s3]``.
Each worker is its own process (as on Lambda). The job is LR GA-SGD (AllReduce) on
synthetic Higgs-like shards, 4 epochs of rounds/4 steps. After each run the bench checks:

- no update lost or applied twice: the model equals single-process SGD over the
  concatenated batches (max abs difference <= 1e-5), and every rank ends with it;
- memory stays flat: each worker's peak RSS at the end is within 5% (or 8 MB) of its peak
  after the first epoch;

and prints rounds per second (rounds / the slowest worker's training time) and the memory
figures. It exits non-zero if a check fails. Results go to ``bench/results/load.csv``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

from lambdaml import codec, keys
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.local import services
from lambdaml.storage import open_storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import report

from tests.helpers import single_process_sgd

EPOCHS = 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--channels", default="redis,s3")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    steps = args.rounds // EPOCHS
    batch = 10
    rows = args.workers * steps * batch

    moto, redis = services.start_moto(), services.start_redis()
    table: list[list[str]] = []
    failures: list[str] = []
    with services.running(moto, redis), tempfile.TemporaryDirectory() as results_dir:
        storage = StorageSpec(bucket="load-data", endpoint_url=moto.url)
        store = open_storage(storage)
        store.ensure()
        X, y, _ = synthetic.higgs_like(rows, seed=0)
        manifest = shards.prepare(store, "load", X, y, shards=args.workers, test_fraction=0.0, seed=0)
        for kind in args.channels.split(","):
            channel = {"kind": kind, "port": redis.port} if kind == "redis" else {"kind": kind}
            if kind == "s3":
                channel.update(bucket="load-comm", endpoint_url=moto.url)
            job = parse_job(
                {
                    "name": "load",
                    "workers": args.workers,
                    "dataset": "load",
                    "storage": storage.model_dump(),
                    "channel": channel,
                    "algorithm": {"name": "ga_sgd", "lr": 0.1, "batch_size": batch, "epochs": EPOCHS, "seed": 0},
                    "sync": {"timeout_s": 300},
                }
            )
            result = run_job(job, results_dir=results_dir)
            model = codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]
            error = float(np.max(np.abs(model - single_process_sgd(store, manifest, job))))
            train_s = max(w.epoch_elapsed_s[-1] - w.times.load_s for w in result.workers)
            growth = [w.memory.peak_rss_mb - w.memory.peak_rss_after_first_epoch_mb for w in result.workers]
            peak = max(w.memory.peak_rss_mb for w in result.workers)
            flat = all(
                g <= max(8.0, 0.05 * w.memory.peak_rss_after_first_epoch_mb)
                for g, w in zip(growth, result.workers, strict=True)
            )
            if error > 1e-5 or not result.ranks_agree:
                failures.append(f"{kind}: model differs from the reference by {error:.2e}")
            if not flat:
                failures.append(f"{kind}: memory grew by up to {max(growth):.1f} MB after the first epoch")
            table.append(
                [
                    kind,
                    str(args.workers),
                    str(steps * EPOCHS),
                    f"{train_s:.1f}",
                    f"{steps * EPOCHS / train_s:.1f}",
                    f"{error:.1e}",
                    f"{peak:.0f}",
                    f"{max(growth):.1f}",
                ]
            )
            print(f"  {kind}: {table[-1][4]} rounds/s")

    header = ["channel", "W", "rounds", "train s", "rounds/s", "max |w - ref|", "peak RSS MB", "RSS growth MB"]
    print(f"wrote {report('load', header, table)}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
