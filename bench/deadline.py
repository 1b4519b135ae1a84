"""A deadline job on the local stack, predicted from the stack's calibrated profile: is the measured
time within the range the configuration was chosen by?

Run: ``.venv/bin/python bench/deadline.py [--deadline 10m] [--jobs 2]``. In a fresh ``LAMBDAML_HOME``
it brings up a local stack with a Redis cache (``lambdaml local up``: the built artifacts on the
local Lambda service), calibrates it (``lambdaml calibrate --stack NAME --quick``), writes a
Higgs-like dataset to its bucket, then trains a job file with ``workers: auto`` and ``--deadline``
on the stack, ``--jobs`` times. Prints the line the choice was said in, then each job's predicted
time and range against its measured wall time, and whether it fell in the range.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

NAME = "deadline-bench"
ROWS = 1_000_000


def lambdaml(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=1800, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"lambdaml {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deadline", default="10m")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, "LAMBDAML_HOME": tmp}
        os.environ["LAMBDAML_HOME"] = tmp
        from lambdaml.backends import stack as remote
        from lambdaml.data import shards, synthetic

        lambdaml(env, "local", "up", "--name", NAME, "--cache", "redis")
        try:
            print("calibrating the stack (lambdaml calibrate --stack --quick) ...", flush=True)
            lambdaml(env, "calibrate", "--stack", NAME, "--quick", "--channels", "s3,redis")
            X, y, _ = synthetic.higgs_like(ROWS, seed=21)
            shards.prepare(remote.stack_store(remote.resolve_stack(NAME)), "deadline", X, y, shards=8)
            job = {
                "name": "deadline",
                "workers": "auto",
                "dataset": "deadline",
                "channel": {"kind": "redis"},
                "algorithm": {"name": "ga_sgd", "epochs": 2, "batch_size": 100, "lr": 0.3},
                "sync": {"pattern": "allreduce", "timeout_s": 300},
            }
            path = Path(tmp) / "deadline.yaml"
            path.write_text(yaml.safe_dump(job))
            inside = 0
            for n in range(args.jobs):
                done = lambdaml(
                    env, "train", str(path), "--stack", NAME, "--deadline", args.deadline, "--output", "json"
                )
                said = next(line for line in done.stderr.splitlines() if line.startswith("chose "))
                result = json.loads(done.stdout)
                p, measured = result["prediction"], result["wall_time_s"]
                ok = p["time_low_s"] <= measured <= p["time_high_s"]
                inside += ok
                print(f"job {n + 1}: {said}", flush=True)
                print(f"  predicted {p['time_s']:.1f}s ({p['time_low_s']:.1f}-{p['time_high_s']:.1f}s), "
                      f"measured {measured:.1f}s: {'within' if ok else 'OUTSIDE'} the range", flush=True)  # fmt: skip
            print(f"\n{inside} of {args.jobs} jobs within their predicted range")
        finally:
            lambdaml(env, "local", "down", "--name", NAME)


if __name__ == "__main__":
    main()
