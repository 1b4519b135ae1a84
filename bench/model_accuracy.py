"""How well the analytic model predicts real local training runs.

Run: ``.venv/bin/python bench/model_accuracy.py [--quick]``. It starts its own moto,
Redis and Memcached on loopback ports, calibrates a profile of this machine on them
(exactly what ``lambdaml calibrate`` measures), then trains logistic regression for every
configuration (algorithm x channel x W x model size x pattern) with the local backend, W
worker processes as on Lambda, and compares the model's predicted time per epoch with
the measured one.

Measured: the median of rank 0's epoch durations after the first (so process start-up
and loading, which the model also predicts but separately, stay out, and a burst of load
from elsewhere on a shared machine moves the median less than the mean). Predicted:
``predict_faas(...).round_s`` times the rounds per epoch, from the profile calibrated in
the same run. Every worker shares this machine's
cores, and the profile says so (``faas.shared_cores``).

Every configuration is measured in two passes a minute or two apart (``--repeat``); the
measured time is their median, and their spread is the machine's own noise, printed next
to the model's error. Each pass is predicted from the channel calibrated right before it
(this machine and moto drift by 10-30% over minutes, which is no error of the model's);
the predicted time is the median of the passes' predictions. Prints a table (predicted,
measured, error, spread, and requests per round predicted against counted) with the
median and largest absolute error, and writes ``bench/results/model_accuracy.csv``, the
profile of the last pass (``model_accuracy_profile.json``) and a predicted-against-measured
plot (``model_accuracy.png``); with ``--algorithms`` naming others than ga_sgd, the same
under ``model_accuracy_relaxed``. Where GA-SGD ran in the same run, each other algorithm's row
also gives its error *against GA-SGD* (predicted over measured of its time relative to GA-SGD's
on the same channel, W, size and pattern), which cancels what the channel's calibration gets
wrong and leaves what the model says of the relaxation. ``--table CSV`` prints a written CSV's
table again.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import logging
import math
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import bsp_job

from analytic_model.calibration import Calibration
from analytic_model.prediction import heartbeats, predict_faas
from analytic_model.profile import Profile, load_profile, save_profile
from analytic_model.workload import Workload, schedule
from lambdaml.calibrate import ComputeProbe, Effort, calibrate, channel_figures, cores
from lambdaml.calibrate.heartbeat import measure_heartbeat
from lambdaml.channels import open_channel
from lambdaml.config import ChannelSpec, StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.local import services
from lambdaml.storage import open_storage

log = logging.getLogger("bench.model_accuracy")

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("s3", "redis", "memcached", "dynamodb")
PATTERNS = ("allreduce", "scatter_reduce")
BATCH = 100
SHARDS = 4  # a multiple of every W measured
TIMED_ROUNDS = 160  # rounds timed per run at least: a round of a few ms is at the mercy of the scheduler,
# and an epoch in ten carries a checkpoint or a heartbeat that the median epoch should not


@dataclass(frozen=True)
class Size:
    """A model size: LR on dense Higgs-like rows, or on sparse RCV1-like rows with many columns."""

    name: str
    features: int
    sparse: bool
    rows: int  # training rows in all
    words: int = 75  # sparse: words drawn a row (``rcv1_like``'s nnz_per_row; repeats add up)
    probed: bool = True  # its own compute probe; else priced by the calibrated sparse rates (per non-zero)

    @property
    def params(self) -> int:
        return self.features + 1


SIZES = {
    "small": Size("small", 28, sparse=False, rows=3200),
    "large": Size("large", 100_000, sparse=True, rows=3200),
    # RCV1's width at about 0.3% density, priced from the sparse rates alone: no probe of its own.
    "rcv1": Size("rcv1", 47_236, sparse=True, rows=3200, words=150, probed=False),
}


@dataclass(frozen=True)
class Variant:
    """An algorithm as a job file names it (``algorithm``), and the cost model's workload fields for it."""

    name: str
    algorithm: dict[str, Any]
    workload: dict[str, Any]
    ring: bool = False  # the pattern only carries the epoch's loss sum: one pattern is enough


#: The algorithms the bench trains. The relaxed ones use a small learning rate: only their
#: time is measured, and Adam's steps at 0.1 can overflow a linear model's loss.
VARIANTS = {
    "ga_sgd": Variant("ga_sgd", {"name": "ga_sgd", "lr": 0.1}, {}),
    "ef_onebit": Variant(
        "ef_onebit",
        {"name": "ga_sgd", "lr": 0.01, "compression": {"name": "onebit"}},
        {"algorithm": "ga_sgd", "compression": "onebit"},
    ),
    "onebit_adam": Variant("onebit_adam", {"name": "onebit_adam", "lr": 0.01}, {"algorithm": "onebit_adam"}),
    "choco_onebit": Variant(
        "choco_onebit",
        {"name": "choco_sgd", "lr": 0.01, "compression": {"name": "onebit"}},
        {"algorithm": "choco_sgd", "compression": "onebit"},
        ring=True,
    ),
}


@dataclass
class Outcome:
    algorithm: str
    channel: str
    workers: int
    size: str
    pattern: str
    predicted_s: float
    measured_s: float
    predicted_requests: float  # per round, all workers
    measured_requests: float
    spread: float = 0.0  # (largest - smallest) / mean of the repeated measurements: the machine's noise
    # Where the time goes, per epoch: predicted (compute, communication, heartbeats) and rank 0's
    # measured (compute, communicating, waiting; their means over every epoch, the first included).
    parts: tuple[float, ...] = ()

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def epochs_for(size: Size, workers: int) -> int:
    """Epochs of one run: the first (start-up) plus enough to time ``TIMED_ROUNDS`` rounds."""
    rounds_per_epoch = math.ceil(size.rows / workers / BATCH)
    return 1 + max(3, math.ceil(TIMED_ROUNDS / rounds_per_epoch))


def prepare(store: Any, size: Size) -> tuple[str, float | None]:
    """Upload the dataset of one model size; returns its name and, where sparse, its non-zeros a row."""
    name = f"acc-{size.name}"
    if size.sparse:
        S, y, _ = synthetic.rcv1_like(size.rows, features=size.features, nnz_per_row=size.words, seed=1)
        shards.prepare(store, name, S, y, shards=SHARDS, test_fraction=0.0)
        return name, S.nnz / size.rows
    X, y, _ = synthetic.higgs_like(size.rows, seed=1)
    shards.prepare(store, name, X, y, shards=SHARDS, test_fraction=0.0)
    return name, None


def measure(
    storage: StorageSpec,
    spec: ChannelSpec,
    dataset: str,
    workers: int,
    pattern: str,
    epochs: int,
    variant: Variant,
    rounds_per_epoch: int,
) -> tuple[float, float, tuple[float, float, float]]:
    """(seconds per epoch after the first, requests per epoch over all workers, rank 0's compute,
    communicating and waiting per epoch) of one real run.

    1-bit Adam warms up for the first (untimed) epoch, so the timed epochs are its compressed phase.
    """
    algorithm = {**variant.algorithm, "batch_size": BATCH, "epochs": epochs}
    if variant.name == "onebit_adam":
        algorithm["warmup_steps"] = rounds_per_epoch
    job = bsp_job("acc", workers, dataset, storage, spec, "lr", algorithm, pattern)
    result = run_job(job, results_dir=None)
    elapsed = [point.elapsed_s for point in result.loss_curve]
    per_epoch = statistics.median(b - a for a, b in itertools.pairwise(elapsed))  # robust to a burst of load
    requests = sum(w.channel.requests for w in result.workers)
    times = next(w.times for w in result.workers if w.rank == 0)
    return per_epoch, requests / epochs, (times.compute_s / epochs, times.communicate_s / epochs, times.wait_s / epochs)


def predict(
    profile: Profile, size: Size, kind: str, workers: int, pattern: str, variant: Variant, nnz_per_row: float | None
) -> tuple[float, float, float, tuple[float, float, float]]:
    """(seconds per epoch, requests per round over all workers, rounds per epoch, and the epoch's
    compute, communication and heartbeats) the model predicts
    for the median epoch: its rounds, and the workers' heartbeats where every epoch ends with one
    (a worker beats at most once a second: shorter epochs mostly end without).

    1-bit Adam's timed epochs all come after its warm-up: predicted as a run whose warm-up is one step in a million.
    """
    workload = Workload(
        "lr",
        dataset_bytes=1.0,
        samples=size.rows,
        features=size.features,
        sparse=size.sparse,
        nnz_per_row=nnz_per_row,
        batch_size=BATCH,
        **variant.workload,
    )
    per_epoch_rounds = schedule(workload, workers).rounds / workload.epochs
    if variant.name == "onebit_adam":
        workload = replace(workload, warmup_steps=1, rounds=1e6)
    prediction = predict_faas(workload, workers, kind, pattern, 3008, profile)
    requests = sum(prediction.requests[k] for k in ("puts", "gets", "lists", "deletes"))
    rounds_s = prediction.round_s * per_epoch_rounds
    every_epoch_beats = heartbeats(profile, workload.epochs, rounds_s) >= workload.epochs
    heartbeat_s = prediction.time["heartbeat_s"] / workload.epochs if every_epoch_beats else 0.0
    share = per_epoch_rounds / prediction.rounds
    parts = (prediction.time["compute_s"] * share, prediction.time["communicate_s"] * share, heartbeat_s)
    return rounds_s + heartbeat_s, requests, per_epoch_rounds, parts


def write_outputs(outcomes: list[Outcome], stem: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / f"{stem}.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(
            ["algorithm", "channel", "W", "size", "pattern", "predicted_s", "measured_s", "error", "spread",
             "pred_req", "req", *PARTS]
        )  # fmt: skip
        for o in outcomes:
            out.writerow(
                [o.algorithm, o.channel, o.workers, o.size, o.pattern, f"{o.predicted_s:.5f}", f"{o.measured_s:.5f}",
                 f"{o.error:.4f}", f"{o.spread:.4f}", f"{o.predicted_requests:.1f}", f"{o.measured_requests:.1f}",
                 *(f"{x:.5f}" for x in o.parts)]
            )  # fmt: skip
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 6))
    for kind, marker in zip(KINDS, "os^D", strict=True):
        points = [o for o in outcomes if o.channel == kind]
        if points:
            ax.scatter([o.measured_s for o in points], [o.predicted_s for o in points], marker=marker, label=kind)
    low = min(min(o.measured_s, o.predicted_s) for o in outcomes) * 0.8
    high = max(max(o.measured_s, o.predicted_s) for o in outcomes) * 1.25
    ax.plot([low, high], [low, high], "k-", lw=1, label="exact")
    ax.fill_between([low, high], [low * 0.85, high * 0.85], [low * 1.15, high * 1.15], alpha=0.15, label="15%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time per epoch (s)")
    ax.set_ylabel("predicted time per epoch (s)")
    ax.legend()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def relative_error(o: Outcome, outcomes: list[Outcome]) -> float | None:
    """The error of ``o`` against GA-SGD's on the same channel, W, size and pattern in the same run:
    predicted / measured of the ratio of the two, so the channel's calibration cancels out."""
    if o.algorithm == "ga_sgd":
        return None
    for ref in outcomes:
        if ref.algorithm == "ga_sgd" and (ref.channel, ref.workers, ref.size, ref.pattern) == (
            o.channel, o.workers, o.size, o.pattern,
        ):  # fmt: skip
            return (o.predicted_s / ref.predicted_s) / (o.measured_s / ref.measured_s) - 1.0
    return None


def read_outcomes(path: Path) -> list[Outcome]:
    """The outcomes a run wrote to its CSV (to print its table again)."""
    with path.open(newline="") as f:
        return [
            Outcome(
                row.get("algorithm", "ga_sgd"),  # CSVs written before the bench ran other algorithms
                row["channel"],
                int(row["W"]),
                row["size"],
                row["pattern"],
                float(row["predicted_s"]),
                float(row["measured_s"]),
                float(row["pred_req"]),
                float(row["req"]),
                float(row["spread"]),
                tuple(float(row[p]) for p in PARTS) if all(row.get(p) for p in PARTS) else (),
            )
            for row in csv.DictReader(f)
        ]


#: The CSV's columns of ``Outcome.parts``.
PARTS = ("pred_compute_s", "pred_comm_s", "pred_beat_s", "compute_s", "communicate_s", "wait_s")


def print_parts(outcomes: list[Outcome]) -> None:
    """Where each configuration's epoch goes, predicted against rank 0's measured times."""
    print("\n| channel | W | model | pattern | compute pred / meas ms | comm+waits pred / meas ms | beats pred ms |")
    print("|---|--:|---|---|--:|--:|--:|")
    for o in outcomes:
        if len(o.parts) == len(PARTS):
            pc, pm, pb, c, m, w = (1e3 * x for x in o.parts)
            print(
                f"| {o.channel} | {o.workers} | {o.size} | {o.pattern} | {pc:.1f} / {c:.1f} | {pm:.1f} / {m + w:.1f} "
                f"| {pb:.1f} |"
            )


def print_table(outcomes: list[Outcome]) -> None:
    print(
        "| algorithm | channel | W | model | pattern | predicted s/epoch | measured s/epoch | error | vs GA-SGD "
        "| run spread | requests/round |"
    )
    print("|---|---|--:|---|---|--:|--:|--:|--:|--:|--:|")
    for o in outcomes:
        relative = relative_error(o, outcomes)
        print(
            f"| {o.algorithm} | {o.channel} | {o.workers} | {o.size} | {o.pattern} | {o.predicted_s:.3f} | "
            f"{o.measured_s:.3f} | {o.error:+.0%} | {'' if relative is None else format(relative, '+.0%')} | "
            f"{o.spread:.0%} | {o.predicted_requests:.0f} / {o.measured_requests:.0f} |"
        )
    errors = [abs(o.error) for o in outcomes]
    targets = "median <= 12%, none above 30%"
    print(
        f"\n{len(outcomes)} configurations: median absolute error {statistics.median(errors):.1%}, "
        f"largest {max(errors):.1%} (targets: {targets}); median spread between "
        f"passes {statistics.median(o.spread for o in outcomes):.1%} (the machine's own noise)"
    )
    for name in dict.fromkeys(o.algorithm for o in outcomes):
        mine = [o for o in outcomes if o.algorithm == name]
        line = f"  {name}: {len(mine)} configurations, median {statistics.median(abs(o.error) for o in mine):.1%}, "
        line += f"largest {max(abs(o.error) for o in mine):.1%}"
        against = [abs(r) for o in mine if (r := relative_error(o, outcomes)) is not None]
        if against:
            line += f"; against GA-SGD: median {statistics.median(against):.1%}, largest {max(against):.1%}"
        print(line)
    others = [abs(r) for o in outcomes if (r := relative_error(o, outcomes)) is not None]
    if others:
        print(
            f"  every relaxed configuration against GA-SGD: median {statistics.median(others):.1%}, "
            f"largest {max(others):.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="redis and s3 only (W=2 and 4, every size)")
    parser.add_argument("--channels", default=None, help="comma-separated subset of " + ",".join(KINDS))
    parser.add_argument("--workers", default="2,4", help="comma-separated W values (divisors of 4)")
    parser.add_argument(
        "--sizes",
        default="small,large,rcv1",
        help="comma-separated: small (d=28), large (d=1e5, sparse), rcv1 (d=47,236 at 0.3%%, from the sparse rates)",
    )
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument(
        "--algorithms",
        default="ga_sgd",
        help=f"comma-separated subset of {','.join(VARIANTS)} (default: ga_sgd; the ring method runs one pattern)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"epochs per run, the first not timed (default: >= {TIMED_ROUNDS} timed rounds)",
    )
    parser.add_argument("--profile", type=Path, default=None, help="use this saved profile instead of calibrating")
    parser.add_argument("--repeat", type=int, default=2, help="passes over the configurations (default 2)")
    parser.add_argument("--table", type=Path, default=None, help="print the table of a CSV this bench wrote, and stop")
    args = parser.parse_args(argv)
    if args.table:
        outcomes = read_outcomes(args.table)
        print_table(outcomes)
        print_parts(outcomes)
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)

    kinds = (args.channels or ("redis,s3" if args.quick else "s3,redis,memcached")).split(",")
    worlds = [int(w) for w in args.workers.split(",")]
    sizes = [SIZES[s] for s in args.sizes.split(",")]
    patterns = args.patterns.split(",")
    names = args.algorithms.split(",")
    if (
        (args.epochs is not None and args.epochs < 2)
        or args.repeat < 1
        or any(SHARDS % w for w in worlds)
        or set(kinds) - set(KINDS)
        or set(names) - set(VARIANTS)
    ):
        parser.error(
            f"need --epochs >= 2, --repeat >= 1, W dividing 4, channels among {','.join(KINDS)}, "
            f"algorithms among {','.join(VARIANTS)}"
        )
    variants = [VARIANTS[n] for n in names]
    # GA-SGD's grid keeps its files; a run of the relaxed algorithms writes its own.
    stem = "model_accuracy" if names == ["ga_sgd"] else "model_accuracy_relaxed"

    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        moto = services.start_moto()
        stack.callback(moto.stop)
        redis = services.start_redis()
        stack.callback(redis.stop)
        # Room for every value the calibrations and runs leave: at the default 256 MB, memcached's
        # slabs were all assigned by the time the 47,237-float rcv1 vectors came, their size class
        # got 2 pages (4 values), and W = 4 evicted a round's values before they were read.
        memcached = services.start_memcached(memory_mb=4096)
        stack.callback(memcached.stop)
        token = uuid.uuid4().hex[:8]
        storage = StorageSpec(bucket=f"acc-data-{token}", endpoint_url=moto.url)
        specs = {
            "s3": ChannelSpec(kind="s3", bucket=f"acc-comm-{token}", endpoint_url=moto.url),
            "dynamodb": ChannelSpec(kind="dynamodb", table=f"acc-comm-{token}", endpoint_url=moto.url),
            "redis": ChannelSpec(kind="redis", host="127.0.0.1", port=redis.port),
            "memcached": ChannelSpec(kind="memcached", host="127.0.0.1", port=memcached.port),
        }
        chosen = {k: specs[k] for k in kinds}
        store = open_storage(storage)
        store.ensure()
        prepared = {s.name: prepare(store, s) for s in sizes}
        for spec in chosen.values():
            with open_channel(spec) as channel:
                channel.ensure()

        def step(what: str) -> None:
            log.info("[%4.0fs] calibrating %s", time.monotonic() - started, what)

        if args.profile:
            measured = Calibration.from_json(json.loads(args.profile.read_text()))
        else:
            # Compute, start-up and loading first; each channel right before each pass of its
            # runs, so the profile sees the machine as loaded as the runs it predicts.
            # The sizes without a probe of their own are priced by the sparse rates calibrate measures.
            probes = [ComputeProbe("lr", s.features, s.sparse, BATCH, rows=s.rows) for s in sizes if s.probed]
            measured = calibrate(
                {}, probes, storage=storage, effort=Effort(), target="local", shared_cores=cores(), on_step=step
            )
        outcomes: list[Outcome] = []
        for kind in kinds:
            configs = [
                (variant, size, w, pattern)
                for variant in variants
                for size in sizes
                for w in worlds
                for pattern in (patterns[:1] if variant.ring else patterns)
            ]
            runs: dict[tuple[str, str, int, str], list[tuple[float, float, tuple[float, float, float]]]] = {}
            predictions: dict[tuple[str, str, int, str], list[tuple[float, float, float, tuple[float, ...]]]] = {}
            for repeat in range(args.repeat):  # repeats a minute apart: what the machine's noise does
                # Each pass is predicted from the channel calibrated right before it: the machine
                # (and moto) drift by 10-30% over minutes, which is no error of the model's.
                if not args.profile:
                    measured = measured.with_channel(kind, channel_figures(chosen[kind], Effort(), step))
                    # The data store too: epochs of a second or longer end with heartbeats on it, and
                    # moto slows as jobs fill it.
                    step("heartbeats on the data store")
                    alone, per_worker = measure_heartbeat(storage, Effort())
                    measured = measured.with_heartbeat(alone, per_worker)
                    log.info("[%4.0fs] heartbeat %.1f ms, +%.1f ms per further worker", time.monotonic() - started,
                             alone * 1e3, per_worker * 1e3)  # fmt: skip
                profile = load_profile(save_profile(measured, RESULTS / f"{stem}_profile.json"))
                for variant, size, workers, pattern in configs:
                    key = (variant.name, size.name, workers, pattern)
                    epochs = args.epochs or epochs_for(size, workers)
                    per_epoch = math.ceil(size.rows / workers / BATCH)
                    runs.setdefault(key, []).append(
                        measure(
                            storage, chosen[kind], prepared[size.name][0], workers, pattern, epochs, variant, per_epoch
                        )
                    )
                    predictions.setdefault(key, []).append(
                        predict(profile, size, kind, workers, pattern, variant, prepared[size.name][1])
                    )
                    log.info(
                        "[%4.0fs] %s %s W=%d %s %s (pass %d): %.3fs per epoch, predicted %.3fs "
                        "(compute %.1f / %.1f ms, comm %.1f / %.1f ms + waits %.1f ms)",
                        time.monotonic() - started, variant.name, kind, workers, size.name, pattern, repeat + 1,
                        runs[key][-1][0], predictions[key][-1][0], 1e3 * predictions[key][-1][3][0],
                        1e3 * runs[key][-1][2][0], 1e3 * predictions[key][-1][3][1], 1e3 * runs[key][-1][2][1],
                        1e3 * runs[key][-1][2][2],
                    )  # fmt: skip
            for variant, size, workers, pattern in configs:
                key = (variant.name, size.name, workers, pattern)
                times = [t for t, _, _ in runs[key]]
                requests = statistics.fmean(r for _, r, _ in runs[key])
                predicted_s = statistics.median(p for p, _, _, _ in predictions[key])
                predicted_requests, rounds = predictions[key][-1][1:3]
                mean = statistics.fmean(times)
                parts = tuple(statistics.fmean(p[3][i] for p in predictions[key]) for i in range(3)) + tuple(
                    statistics.fmean(r[2][i] for r in runs[key]) for i in range(3)
                )
                outcomes.append(
                    Outcome(
                        variant.name, kind, workers, size.name, pattern, predicted_s, statistics.median(times),
                        predicted_requests, requests / rounds, (max(times) - min(times)) / mean, parts,
                    )
                )  # fmt: skip
    print()
    print_table(outcomes)
    print_parts(outcomes)
    write_outputs(outcomes, stem)
    print(f"\nwrote {RESULTS / (stem + '.csv')} ({time.monotonic() - started:.0f}s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
