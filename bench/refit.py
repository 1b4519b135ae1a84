"""Does the model learn from the user's own runs? ``lambdaml calibrate --from-results`` on five
finished jobs, then five new jobs of the same kinds: their median time error against the first five's.

Run: ``.venv/bin/python bench/refit.py [--start aws|calibrated]``. It starts its own moto, Redis and
Memcached on loopback ports and a fresh ``LAMBDAML_HOME``; with ``--start calibrated`` (the default)
it first runs ``lambdaml calibrate --quick`` on them, so the five jobs are predicted from this
machine's calibrated profile, as a user's are who calibrated; ``aws``: from the shipped AWS defaults.
Five kinds of jobs (GA-SGD logistic regression over Redis, S3 and Memcached at W = 2 and 4), each
run with ``lambdaml train`` (local worker processes), then the refit, then the five again. Prints
each job's predicted and measured wall time and the two medians of |measured - predicted| / predicted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.local import services
from lambdaml.storage import open_storage

KINDS = (("redis", 2), ("redis", 4), ("s3", 2), ("s3", 4), ("memcached", 2))
ROWS = 40_000


def lambdaml(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, "LAMBDAML_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=1800, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"lambdaml {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def channel(kind: str, moto: str, ports: dict[str, int], n: int) -> dict[str, Any]:
    if kind == "s3":
        return {"kind": "s3", "bucket": f"refit-comm-{n}", "endpoint_url": moto}
    return {"kind": kind, "host": "127.0.0.1", "port": ports[kind]}


def run_jobs(
    home: Path, work: Path, storage: StorageSpec, moto: str, ports: dict[str, int], label: str
) -> list[dict[str, Any]]:
    """Each kind's job once; its printed result (prediction and measured wall time)."""
    rows = []
    for n, (kind, workers) in enumerate(KINDS):
        job = {
            "name": f"{label}-{kind}-{workers}",
            "workers": workers,
            "dataset": "refit",
            "storage": storage.model_dump(mode="json"),
            "channel": channel(kind, moto, ports, n),
            "algorithm": {"name": "ga_sgd", "epochs": 2, "batch_size": 200, "lr": 0.3},
            "sync": {"pattern": "allreduce", "timeout_s": 300},
        }
        path = work / f"{label}-{n}.yaml"
        path.write_text(yaml.safe_dump(job))
        done = lambdaml(home, "train", str(path), "--results-dir", str(work / label), "--output", "json")
        result = json.loads(done.stdout)
        rows.append(result)
        predicted = result["prediction"]["time_s"]
        print(f"  {label:6} {kind:9} W={workers}: predicted {predicted:6.2f}s, measured {result['wall_time_s']:6.2f}s "
              f"({result['prediction']['profile'].split('/')[-1]})", flush=True)  # fmt: skip
    return rows


def median_error(rows: list[dict[str, Any]]) -> float:
    return statistics.median(
        abs(r["wall_time_s"] - r["prediction"]["time_s"]) / r["prediction"]["time_s"] for r in rows
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", choices=("aws", "calibrated"), default="calibrated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        moto, redis, memcached = services.start_moto(), services.start_redis(), services.start_memcached()
        try:
            ports = {"redis": redis.port, "memcached": memcached.port}
            storage = StorageSpec(bucket="refit-data", endpoint_url=moto.url)
            store = open_storage(storage)
            store.ensure()
            X, y, _ = synthetic.higgs_like(ROWS, seed=11)
            shards.prepare(store, "refit", X, y, shards=4)
            if args.start == "calibrated":
                print("calibrating this machine (lambdaml calibrate --quick) ...", flush=True)
                servers = ["--redis", f"127.0.0.1:{redis.port}", "--memcached", f"127.0.0.1:{memcached.port}"]
                lambdaml(home, "calibrate", "--quick", "--endpoint-url", moto.url, *servers)
            first = run_jobs(home, work, storage, moto.url, ports, "before")
            print(lambdaml(home, "calibrate", "--from-results", str(work / "before")).stdout.strip(), flush=True)
            second = run_jobs(home, work, storage, moto.url, ports, "after")
        finally:
            for service in (moto, redis, memcached):
                service.process.terminate()
    before, after = median_error(first), median_error(second)
    print(f"\nmedian time error: {before:.1%} on the five jobs before the refit (from the {args.start} profile), "
          f"{after:.1%} on five new jobs of the same kinds after it ({after / before:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
