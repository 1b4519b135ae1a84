"""One IaaS worker: a rank started by ``torchrun``, locally or on an EC2 cluster node.

It reads the job record from the data bucket, joins the gloo group, trains with the same
worker core as Lambda (``run_worker``) over a torch.distributed communicator, and writes
its report to the bucket. On a cluster (``--assemble``) rank 0 then writes the result
record, billed as the cluster's EC2 instances; locally the backend does that.

Progress and errors also go, one JSON line each, to ``--events DIR/rank<R>.jsonl``, which
the local backend follows.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal, TypedDict

from lambdaml import keys
from lambdaml.config import JobSpec, StorageSpec
from lambdaml.cost import JobCost, ec2_cost
from lambdaml.data.shards import read_manifest
from lambdaml.errors import LambdaMLError
from lambdaml.runtime import records
from lambdaml.runtime.heartbeat import Heartbeat, at_most_every, both
from lambdaml.runtime.job_logs import WorkerLog
from lambdaml.runtime.reports import WorkerReport, WorkerRow
from lambdaml.runtime.results import assemble_result, collect_reports
from lambdaml.runtime.worker import run_worker
from lambdaml.storage import open_storage, put_json

log = logging.getLogger(__name__)

#: How often a rank writes the steps it has done to its events file (a local file: no request).
STEPS_EVERY_S = 1.0


class EpochLine(TypedDict):
    kind: Literal["epoch"]
    rank: int
    epoch: int
    loss: float
    elapsed_s: float


class StepsLine(TypedDict):
    kind: Literal["steps"]
    rank: int
    epoch: int
    step: int
    steps: int


class DoneLine(TypedDict):
    kind: Literal["done"]
    rank: int


class ErrorLine(TypedDict):
    kind: Literal["error"]
    rank: int
    type: str  # the error's class, or "crash", "interrupted"
    message: str


#: A line of a rank's events file: an epoch ended, steps done, the rank done, or its error.
RankEvent = EpochLine | StepsLine | DoneLine | ErrorLine


def cluster_cost(job: JobSpec, workers: Sequence[WorkerRow], wall_s: float) -> JobCost:
    """One instance per worker, for the run's wall time (the ``Backend.cost`` of IaaS)."""
    return ec2_cost(job.iaas.instance_type, job.workers, wall_s, job.storage.region)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lambdaml.runtime.iaas", description=__doc__)
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--attempt", type=int, default=1, help="the attempt of the job this run is")
    parser.add_argument("--bucket", required=True, help="the data bucket holding jobs/<id>/spec.json")
    parser.add_argument("--endpoint-url", default=None)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--events", default=None, help="directory for per-rank JSON-lines progress")
    parser.add_argument("--assemble", action="store_true", help="rank 0 writes the result record (clusters)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rank = int(os.environ.get("RANK", "-1"))  # torchrun's; known before the group forms
    events = (Path(args.events) / f"rank{rank}.jsonl").open("a", buffering=1) if args.events else None
    worker_log: WorkerLog | None = None  # on this machine (iaas-local), its lines for ``lambdaml logs``
    try:
        from lambdaml.comm.torchdist import TorchDistCommunicator, init_process_group

        store = open_storage(StorageSpec(bucket=args.bucket, endpoint_url=args.endpoint_url, region=args.region))
        job = records.stored_job(store, args.job_id)
        attempt = records.read_attempt(store, args.job_id, args.attempt)
        rank, world = init_process_group(job.sync.timeout_s)
        if events is not None:
            worker_log = WorkerLog.open(attempt, rank, epochs=job.algorithm.epochs, whole_process=True)
        if world != job.workers:
            raise LambdaMLError(f"job {args.job_id} has {job.workers} workers but torchrun started {world}")
        started_at, started = datetime.now(UTC).isoformat(), time.perf_counter()

        def on_epoch(r: int, epoch: int, loss: float, elapsed: float) -> None:
            if worker_log is not None:
                worker_log.epoch(epoch, loss, elapsed)
            _emit(events, {"kind": "epoch", "rank": r, "epoch": epoch, "loss": loss, "elapsed_s": elapsed})

        def on_step(r: int, epoch: int, step: int, steps: int) -> None:
            _emit(events, {"kind": "steps", "rank": r, "epoch": epoch, "step": step, "steps": steps})

        comm = TorchDistCommunicator(rank, world)
        beat = Heartbeat(store, attempt, every_s=job.runtime.heartbeat_every_s, final_epoch=job.algorithm.epochs)
        steps = both(at_most_every(STEPS_EVERY_S, on_step), beat.step)
        report = run_worker(job, attempt, rank, comm=comm, store=store, on_epoch=both(on_epoch, beat), on_step=steps)
        assert isinstance(report, WorkerReport)  # without a Lifetime a run never stops early
        put_json(store, keys.worker_report(args.job_id, attempt.number, rank), report.to_json())
        if args.assemble and rank == 0:
            reports = collect_reports(store, job, attempt)
            manifest = read_manifest(store, job.dataset, attempt.dataset_version)
            wall_s = time.perf_counter() - started
            result = assemble_result(
                job,
                attempt,
                manifest,
                reports,
                wall_s=wall_s,
                started_at=started_at,
                backend="iaas",
                cost=cluster_cost,
            )
            records.finish(store, attempt, result)
        _emit(events, {"kind": "done", "rank": rank})
    except LambdaMLError as exc:
        _emit(events, {"kind": "error", "rank": rank, "type": type(exc).__name__, "message": str(exc)})
        print(f"error: rank {rank}: {exc}", file=sys.stderr)
        if worker_log is not None:
            worker_log.line(f"rank {rank} failed: {exc}", level="ERROR")
        return 1
    except Exception as exc:  # a bug: keep its type so it can be found; the traceback goes to the log
        log.exception("rank %d crashed", rank)
        _emit(events, {"kind": "error", "rank": rank, "type": "crash", "message": f"{type(exc).__name__}: {exc}"})
        return 1
    except KeyboardInterrupt:  # Ctrl-C where torchrun runs in a terminal: the rank stops, quietly
        _emit(events, {"kind": "error", "rank": rank, "type": "interrupted", "message": "interrupted"})
        return 130
    finally:
        _leave_group()
        if worker_log is not None:
            worker_log.close()
        if events is not None:
            events.close()
    return 0


def _emit(events: IO[str] | None, record: RankEvent) -> None:
    if events is not None:
        events.write(json.dumps(record) + "\n")


def _leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
