"""The cost model's IaaS ring against gloo on this machine: all-reduce alone, and whole iaas-local runs.

Run: ``.venv/bin/python bench/iaas_reduce.py [--quick]``. It calibrates a local profile as
``lambdaml calibrate`` does (its ``ec2`` section times a two-rank torchrun group: start-up,
a ring step's latency and the loopback rate, from 1,000 and 10,000,000 float32), then:

- times ``torch.distributed.all_reduce`` over gloo of 1e4..1e7 float32 in groups of W = 2
  and 4 started as the ``iaas-local`` backend starts its ranks, against ``predict_iaas``'s
  ring for the same vector (the calibration points are W=2 at 1e3 and 1e7; everything else is
  predicted). Measured, as calibrated: the least of the repeats of the slowest rank's time (on
  a shared machine other work only adds time); the median is printed next to it;
- trains GA-SGD logistic regression with ``--backend iaas-local`` at W = 2 and 4 (dense
  d=28 and sparse d=1e5 rows) and compares ``predict_iaas(...).round_s`` with the ranks' own
  compute and all-reduce time per round (and shows the wall time per round next to it).

Prints both tables (predicted, measured, predicted/measured) and writes
``bench/results/iaas_reduce.csv``, ``iaas_reduce_runs.csv``, ``iaas_reduce_profile.json``
and ``iaas_reduce.png``. Every rank shares this machine's cores (and the profile says so).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import statistics
import time
import uuid

from common import RESULTS, bsp_job, report
from model_accuracy import BATCH, SIZES, Size, epochs_for, prepare

from analytic_model import Workload, load_profile, predict_iaas
from analytic_model.profile import Profile, save_profile
from lambdaml.calibrate import ComputeProbe, Effort, calibrate, cores
from lambdaml.calibrate.gloo import measure_gloo
from lambdaml.config import StorageSpec
from lambdaml.driver import run_job
from lambdaml.local import services
from lambdaml.storage import open_storage

log = logging.getLogger("bench.iaas_reduce")

INSTANCE = "c5.large"  # what the runs are priced as; on a local profile the hardware is this machine
WORLDS = (2, 4)


def predicted_allreduce_s(profile: Profile, floats: int, workers: int) -> float:
    """predict_iaas's ring for one all-reduce of ``floats`` float32 (a torch model of that size, one round),
    less the round's wait for a delayed peer: the timed calls are lined up by a barrier."""
    workload = Workload("resnet50", params=floats, dataset_bytes=1.0, samples=workers, batch_size=1, rounds=1)
    return predict_iaas(workload, workers, INSTANCE, profile).time["communicate_s"] - profile.ec2.wait_s


def run_round_s(storage: StorageSpec, dataset: str, size: Size, workers: int) -> tuple[float, float, float]:
    """(compute, all-reduce, wall) seconds per round of one real iaas-local GA-SGD run.

    The first two are the ranks' own clocks (the median rank's, over its collectives); the wall
    time is the median epoch after the first over the epoch's rounds, which also holds what the
    model leaves out: the heartbeat each rank writes to the store every epoch.
    """
    epochs = epochs_for(size, workers)
    channel = {"kind": "s3", "bucket": "unused-by-gloo", "endpoint_url": storage.endpoint_url}
    algorithm = {"name": "ga_sgd", "lr": 0.1, "batch_size": BATCH, "epochs": epochs}
    job = bsp_job("iaas-reduce", workers, dataset, storage, channel, "lr", algorithm, iaas={"instance_type": INSTANCE})
    result = run_job(job, backend="iaas-local", results_dir=None)
    rounds = statistics.median(w.channel.requests for w in result.workers)
    compute = statistics.median(w.times.compute_s for w in result.workers)
    comm = statistics.median(w.times.communicate_s for w in result.workers)
    elapsed = [point.elapsed_s for point in result.loss_curve]
    per_epoch = statistics.median(b - a for a, b in itertools.pairwise(elapsed))
    return compute / rounds, comm / rounds, per_epoch / (rounds / epochs)


def predicted_round_s(profile: Profile, size: Size, workers: int) -> tuple[float, float]:
    """(compute, all-reduce) seconds per round that predict_iaas gives the same job."""
    workload = Workload(
        "lr", dataset_bytes=1.0, samples=size.rows, features=size.features, sparse=size.sparse, batch_size=BATCH
    )
    prediction = predict_iaas(workload, workers, INSTANCE, profile)
    return prediction.time["compute_s"] / prediction.rounds, prediction.time["communicate_s"] / prediction.rounds


def plot(points: list[tuple[int, int, float, float, float]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for workers, colour in zip(WORLDS, ("tab:blue", "tab:orange"), strict=True):
        mine = [p for p in points if p[0] == workers]
        ax.plot([p[1] for p in mine], [p[3] * 1e3 for p in mine], "o", c=colour, label=f"gloo, W={workers}")
        ax.plot([p[1] for p in mine], [p[2] * 1e3 for p in mine], "-", c=colour, label=f"model, W={workers}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("float32 values all-reduced")
    ax.set_ylabel("seconds x 1000 per all-reduce")
    ax.set_title("gloo's ring on loopback: measured against predict_iaas")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(RESULTS / "iaas_reduce.png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1e4..1e6 floats, 5 repeats, sparse runs only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)
    floats = [10_000, 100_000, 1_000_000] + ([] if args.quick else [10_000_000])
    repeats = 7 if args.quick else 15
    sizes = [SIZES["large"]] if args.quick else [SIZES["small"], SIZES["large"]]
    started = time.monotonic()

    with contextlib.ExitStack() as stack:
        moto = services.start_moto()
        stack.callback(moto.stop)
        storage = StorageSpec(bucket=f"iaas-reduce-{uuid.uuid4().hex[:8]}", endpoint_url=moto.url)
        store = open_storage(storage)
        store.ensure()
        datasets = {size.name: prepare(store, size) for size in sizes}
        probes = [ComputeProbe("lr", s.features, s.sparse, BATCH, rows=s.rows) for s in sizes]
        measured = calibrate(
            {}, probes, storage=None, effort=Effort(), target="local", shared_cores=cores(),
            on_step=lambda what: log.info("[%4.0fs] calibrating %s", time.monotonic() - started, what),
        )  # fmt: skip
        if measured.ec2 is None:
            parser.error("this benchmark needs torch (pip install 'lambdaml[torch]')")
        profile = load_profile(save_profile(measured, RESULTS / "iaas_reduce_profile.json"))

        points = []
        for workers in WORLDS:
            gloo = measure_gloo(workers, floats, repeats)
            log.info("[%4.0fs] gloo W=%d timed (start-up %.1fs)", time.monotonic() - started, workers, gloo.startup_s)
            points += [
                (workers, n, predicted_allreduce_s(profile, n, workers), gloo.least_s(n), gloo.median_s(n))
                for n in floats
            ]
        runs = []
        for size, workers in itertools.product(sizes, WORLDS):
            measured_round = run_round_s(storage, datasets[size.name], size, workers)
            runs.append((size, workers, predicted_round_s(profile, size, workers), measured_round))
            log.info("[%4.0fs] iaas-local %s W=%d: %.2f ms per round", time.monotonic() - started, size.name, workers,
                     sum(measured_round[:2]) * 1e3)  # fmt: skip

    ec2 = measured.ec2
    print(
        f"\nprofile ec2: start-up {ec2.startup_s:.1f}s, ring step latency {ec2.ring_latency_s * 1e3:.3f} ms, "
        f"loopback {ec2.network_Bps / 1e6:.0f} MB/s, wait {ec2.wait_s * 1e3:.2f} ms a round; "
        f"add {profile.compute.add_Bps / 1e9:.1f} GB/s; {cores()} cores\n"
    )
    header = ["W", "float32", "predicted ms", "gloo ms (least)", "predicted / gloo", "gloo ms (median)"]
    table = [
        [str(w), f"{n:.0e}", f"{p * 1e3:.3f}", f"{m * 1e3:.3f}", f"{p / m:.2f}", f"{med * 1e3:.3f}"]
        for w, n, p, m, med in points
    ]
    path = report("iaas_reduce", header, table)
    errors = [abs(p / m - 1) for _, _, p, m, _ in points]
    print(f"\nall-reduce: median absolute error {statistics.median(errors):.0%}, largest {max(errors):.0%}\n")
    run_header = ["model", "W", "predicted ms/round (compute + ring)", "ranks' ms/round (compute + all-reduce)",
                  "predicted / ranks'", "wall ms/round"]  # fmt: skip
    run_table = []
    run_errors = []
    for size, w, (p_compute, p_ring), (m_compute, m_comm, wall) in runs:
        predicted, measured_s = p_compute + p_ring, m_compute + m_comm
        run_errors.append(abs(predicted / measured_s - 1))
        run_table.append(
            [f"lr d={size.features:g}{' sparse' if size.sparse else ''}", str(w),
             f"{predicted * 1e3:.2f} ({p_compute * 1e3:.2f} + {p_ring * 1e3:.2f})",
             f"{measured_s * 1e3:.2f} ({m_compute * 1e3:.2f} + {m_comm * 1e3:.2f})",
             f"{predicted / measured_s:.2f}", f"{wall * 1e3:.2f}"]
        )  # fmt: skip
    runs_path = report("iaas_reduce_runs", run_header, run_table)
    print(f"\nruns: median absolute error {statistics.median(run_errors):.0%}, largest {max(run_errors):.0%}")
    plot(points)
    print(f"\nwrote {path}, {runs_path} and {RESULTS / 'iaas_reduce.png'} ({time.monotonic() - started:.0f}s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
