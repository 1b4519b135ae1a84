"""A finished job's result: every rank's report gathered into one record, by one function whatever ran it.

Also where results go on disk, and clearing what an attempt left on its channel.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from lambdaml import keys
from lambdaml.channels import Channel, open_channel
from lambdaml.config import JobSpec
from lambdaml.cost import JobCost, ec2_cost, job_cost, lambda_seconds_cost
from lambdaml.data.shards import Manifest
from lambdaml.errors import CodecError, ConfigError, LambdaMLError
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import (
    DatasetInfo,
    JobResult,
    LossPoint,
    WorkerReport,
    WorkerRow,
    billed,
    total_traffic,
)
from lambdaml.storage import decode_json

log = logging.getLogger(__name__)

#: Prices a run from its job, per-worker records and wall time (``Backend.cost``).
CostFunction = Callable[[JobSpec, Sequence[WorkerRow], float], JobCost]


def lambda_job_cost(job: JobSpec, workers: Sequence[WorkerRow], wall_s: float) -> JobCost:
    """Lambda GB-seconds of the workers' billed invocations plus their channel's requests."""
    return job_cost(
        job.channel.kind, total_traffic(workers), billed(workers), wall_s, job.storage.region,
        store=job.channel.store_kind,
    )  # fmt: skip


def check_results_dir(results_dir: str | Path | None) -> None:
    """Before a job starts: its result can be written to ``results_dir`` (made if missing); ConfigError otherwise.

    Found only after training, an unwritable directory lost the local copy of a job the bucket
    calls succeeded.
    """
    if results_dir is None:
        return
    folder = Path(results_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".lambdaml-write-check-"):
            pass
    except FileExistsError:
        raise ConfigError(f"--results-dir {folder}: a file of that name is in the way, not a directory") from None
    except OSError as exc:
        raise ConfigError(f"--results-dir {folder}: cannot write there ({exc.strerror or exc})") from None


def run_time_cost(job: JobSpec, seconds: float, backend: str, *, memory_mb: int | None = None) -> float:
    """What ``seconds`` of a job's run cost, estimated from its workers' time alone (what a job that
    is running, or ended before its result, is priced by): W EC2 instances on IaaS backends; on the
    others W Lambda workers of ``memory_mb`` (default: the job's ``runtime.memory_mb``). Channel
    requests and start-ups are not counted."""
    if backend.startswith("iaas"):
        return float(ec2_cost(job.iaas.instance_type, job.workers, seconds, job.storage.region)["total_dollars"])
    return lambda_seconds_cost(seconds, job.workers, memory_mb or job.runtime.memory_mb, job.storage.region)


class EstimatedCost(TypedDict, total=False):
    """The state record's cost fields of a job that ended without a result (none where it cannot be priced)."""

    cost_dollars: float
    cost_estimated: bool


def estimated_cost_fields(job: JobSpec, seconds: float, backend: str, *, memory_mb: int | None = None) -> EstimatedCost:
    """The state record's cost of a job that ended without a result (failed, cancelled, interrupted):
    estimated from its run time, and said to be; nothing where it cannot be priced."""
    try:
        cost = run_time_cost(job, max(seconds, 0.0), backend, memory_mb=memory_mb)
    except LambdaMLError as exc:  # a region the price table lacks: the ending is recorded all the same
        log.warning("job cost not estimated: %s", exc)
        return {}
    return {"cost_dollars": cost, "cost_estimated": True}


def save_result(result: JobResult, results_dir: str | Path | None) -> JobResult:
    """Write the result record to ``results_dir/<job id>.json`` (if given) and note where.

    Written beside its name and renamed when whole, so a full disk leaves no empty or cut file.
    """
    if results_dir is None:
        return result
    path = Path(results_dir) / f"{result.job_id}.json"
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(result.to_json(), indent=1))
        partial.replace(path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise LambdaMLError(
            f"job {result.job_id} succeeded (its result and model are in the bucket: lambdaml status), but its "
            f"result file could not be written to {path}: {exc.strerror or exc}"
        ) from None
    return replace(result, result_path=str(path))


def clear_job_channel(job: JobSpec, job_id: str, attempt: int, channel: Channel | None = None) -> None:
    """Remove an attempt's keys from its channel (best effort: after a failure the channel may be the cause)."""
    try:
        if channel is not None:
            channel.clear(keys.comm_prefix(job_id, attempt))
            return
        with open_channel(job.channel) as opened:
            opened.clear(keys.comm_prefix(job_id, attempt))
    except LambdaMLError as exc:  # the job has already failed; report that, not this
        log.warning("could not clean up the channel after job %s ended: %s", job_id, exc)


def channel_residue(
    job: JobSpec, job_id: str, *, dry_run: bool = False, still_ended: Callable[[int], bool] | None = None
) -> int:
    """The keys a job's attempts left on its channel (a crash before clean-up): counted, and deleted unless dry_run.

    Deleted an attempt at a time (``comm/JOB/aNNNN/``), each only if ``still_ended(attempt)``,
    asked right before: a job resumed since it was found ended keeps its live keys.
    """
    prefix = keys.comm_job_prefix(job_id)
    with open_channel(job.channel) as channel:
        by_attempt: dict[str, int] = {}
        for key in channel.list(prefix):
            part = key[len(prefix) :].partition("/")[0]
            by_attempt[part] = by_attempt.get(part, 0) + 1
        if dry_run:
            return sum(by_attempt.values())
        removed = 0
        for part, count in sorted(by_attempt.items()):
            number = int(part[1:]) if part[:1] == "a" and part[1:].isdigit() else 0
            if still_ended is not None and not still_ended(number):
                continue
            channel.clear(f"{prefix}{part}/" if number else prefix + part)
            removed += count
    return removed


def assemble_result(
    job: JobSpec,
    attempt: Attempt,
    manifest: Manifest,
    reports: Sequence[WorkerReport],
    *,
    wall_s: float,
    started_at: str,
    backend: str = "lambda",
    cost: CostFunction = lambda_job_cost,
) -> JobResult:
    """The result record: where the model is, the loss curve, the per-worker breakdown.

    ``cost`` prices the run (default: Lambda GB-seconds plus channel requests).
    """
    lead = reports[0]
    if lead.model_uri is None:
        raise CodecError(f"job {attempt.job_id}: rank 0's report does not say where the model is")
    workers = tuple(WorkerRow.of(r) for r in reports)
    curve = zip(lead.losses, lead.epoch_elapsed_s, strict=True)
    accuracy = lead.accuracy
    return JobResult(
        job_id=attempt.job_id,
        attempt=attempt.number,
        backend=backend,
        started_at=started_at,
        finished_at=datetime.now(UTC).isoformat(),
        wall_time_s=wall_s,
        spec=job.model_dump(mode="json"),
        dataset=DatasetInfo(
            name=manifest.name,
            version=manifest.dataset_version,
            train_rows=manifest.train_rows,
            test_rows=manifest.test_rows,
            classes=manifest.n_classes,
        ),
        model_uri=lead.model_uri,
        ranks_agree=len({r.model_checksum for r in reports}) == 1,
        loss_curve=tuple(LossPoint(epoch=i + 1, loss=loss, elapsed_s=t) for i, (loss, t) in enumerate(curve)),
        test_accuracy=accuracy.test_accuracy if accuracy else None,
        classes=accuracy.classes if accuracy else None,
        majority_accuracy=accuracy.majority_accuracy if accuracy else None,
        test_loss=lead.test_loss,
        workers=workers,
        cost=cost(job, workers, wall_s),
        pattern=lead.pattern,
        predicted_round_s=lead.predicted_round_s,
        trial_round_s=lead.trial_round_s,
        attempts_wall_time_s=attempt.earlier_s + wall_s if attempt.number > 1 else None,
    )


def collect_reports(store: Channel, job: JobSpec, attempt: Attempt) -> list[WorkerReport]:
    """Every rank's report of an attempt from the data bucket, in rank order (waiting up to the sync timeout)."""
    report_keys = [keys.worker_report(attempt.job_id, attempt.number, r) for r in range(job.workers)]
    found = store.wait_for(report_keys, job.sync.timeout_s)
    return [WorkerReport.from_json(decode_json(found[k], k), k) for k in report_keys]
