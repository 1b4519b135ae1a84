"""The IaaS backend's process group on this machine: how long ``torchrun`` takes to form a gloo
group of W ranks, and how long gloo's all-reduce of a float32 vector takes in it.

Started exactly as the ``iaas-local`` backend starts its ranks (``torchrun`` listening on
loopback only, one intra-op thread), each rank importing what a real rank imports. Each
rank writes its figures to ``rank<R>.json`` in a directory the caller reads. Needs torch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analytic_model.calibration import Ec2Calibration
from lambdaml.calibrate.probing import Effort
from lambdaml.errors import LambdaMLError
from lambdaml.runtime import torchrun_local

PROBE_TIMEOUT_S = 300.0
SMALL_FLOATS = 1_000  # float32: its time is the ring's two step latencies
UNALIGNED_ROUNDS = 100
LARGE_FLOATS = 10_000_000  # 40 MB: its time is bytes, in chunks larger than the caches (8 MB ran 2x faster)


@dataclass(frozen=True)
class GlooTimes:
    """What one group measured: its start-up, and each vector size's all-reduce seconds."""

    workers: int
    startup_s: float  # from starting torchrun to the slowest rank having joined the group
    samples_s: dict[int, list[float]]  # floats -> each repeat's slowest rank's seconds
    unaligned_s: float  # the smallest size back to back, no barrier: the median round's mean over ranks

    def median_s(self, floats: int) -> float:
        return statistics.median(self.samples_s[floats])

    def least_s(self, floats: int) -> float:
        return min(self.samples_s[floats])


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def measure_gloo(workers: int, floats: Sequence[int], repeats: int) -> GlooTimes:
    """Start ``workers`` ranks with torchrun and time gloo's all-reduce of each size in ``floats``."""
    if not torch_available():
        raise LambdaMLError("timing gloo needs torch: pip install 'lambdaml[torch]'")
    with tempfile.TemporaryDirectory(prefix="lambdaml-gloo-") as out:
        args = ["--out", out, "--repeats", str(repeats), "--sent", repr(time.time())]
        args += ["--floats", ",".join(str(n) for n in floats)]
        command = torchrun_local.command(workers, __name__, args)
        env = {**torchrun_local.loopback_env(), "OMP_NUM_THREADS": "1"}
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise LambdaMLError(f"timing gloo: {workers} ranks did not finish within {PROBE_TIMEOUT_S:g}s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise LambdaMLError(f"timing gloo: torchrun exited with code {done.returncode}: {last[:300]}")
        reports = [json.loads(path.read_text()) for path in sorted(Path(out).glob("rank*.json"))]
    if len(reports) != workers:
        raise LambdaMLError(f"timing gloo: {len(reports)} of {workers} ranks reported")
    times = {}
    for n in floats:
        per_repeat = zip(*(report["times"][str(n)] for report in reports), strict=True)
        times[n] = [max(ranks) for ranks in per_repeat]  # a collective ends with its slowest rank
    per_round = zip(*(report["unaligned"] for report in reports), strict=True)
    unaligned_s = statistics.median(statistics.fmean(ranks) for ranks in per_round)
    return GlooTimes(workers, max(report["joined_s"] for report in reports), times, unaligned_s)


def gloo_figures(effort: Effort) -> Ec2Calibration:
    """The ``ec2`` figures of a local profile: two ranks' start-up, and the ring's step latency and
    bandwidth from a small and a large all-reduce (at W=2 a ring is two steps of half the vector).

    Each is the least of its repeats: on a shared machine other work only ever adds time, and
    a collective waits for whichever rank it delayed (the medians move by 50% from minute to minute).
    """
    times = measure_gloo(2, (SMALL_FLOATS, LARGE_FLOATS), effort.repeats)
    small, large = times.least_s(SMALL_FLOATS), times.least_s(LARGE_FLOATS)
    network_Bps = 4 * (LARGE_FLOATS - SMALL_FLOATS) / max(large - small, 1e-9)
    latency_s = max(small - 4 * SMALL_FLOATS / network_Bps, 0.0) / 2
    # What a round loses beyond the ring when the ranks are not lined up by a barrier: waiting
    # for a peer the machine's other work delayed (the typical round, so the median).
    wait_s = max(times.unaligned_s - small, 0.0)
    return Ec2Calibration(times.startup_s, 0.0, latency_s, network_Bps, wait_s)


def _rank(out: Path, floats: Sequence[int], repeats: int, sent: float) -> None:
    """One rank: join the group as a real IaaS rank does, time each size's all-reduce lined up by a
    barrier, then the first size's back to back as a job's rounds call it."""
    import torch
    import torch.distributed as dist

    import lambdaml.runtime.iaas  # noqa: F401  (what a real rank imports before it joins)

    dist.init_process_group("gloo")
    joined_s = time.time() - sent
    rank = dist.get_rank()
    times: dict[str, list[float]] = {}
    try:
        for n in floats:
            tensor = torch.ones(n, dtype=torch.float32)
            dist.all_reduce(tensor)  # the first call of a size sets up gloo's buffers
            samples = []
            for _ in range(repeats):
                dist.barrier()  # every rank starts the timed call together
                started = time.perf_counter()
                dist.all_reduce(tensor)
                samples.append(time.perf_counter() - started)
            times[str(n)] = samples
        tensor = torch.ones(floats[0], dtype=torch.float32)
        unaligned = []
        for _ in range(UNALIGNED_ROUNDS):  # as a job's rounds: each rank calls when it gets there
            started = time.perf_counter()
            dist.all_reduce(tensor)
            unaligned.append(time.perf_counter() - started)
    finally:
        dist.destroy_process_group()
    report = {"joined_s": joined_s, "times": times, "unaligned": unaligned}
    (out / f"rank{rank}.json").write_text(json.dumps(report))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--floats", required=True, help="comma-separated vector sizes")
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--sent", type=float, required=True, help="when torchrun was started (time.time())")
    args = parser.parse_args(argv)
    _rank(args.out, [int(n) for n in args.floats.split(",")], args.repeats, args.sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
