"""The job driver: check the job before any worker starts, run it, assemble the result."""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lambdaml import keys, seal
from lambdaml.backends import BACKENDS, JobEvent
from lambdaml.channels import Channel, open_channel
from lambdaml.config import JobSpec
from lambdaml.cost import job_cost
from lambdaml.data.shards import Manifest, read_manifest, shards_of_worker
from lambdaml.errors import JobFailed, LambdaMLError
from lambdaml.runtime import records
from lambdaml.runtime.records import Attempt
from lambdaml.storage import open_storage, put_json

log = logging.getLogger(__name__)

#: Prices a run from its job, per-worker records and wall time (``Backend.cost``).
CostFunction = Callable[[JobSpec, list[dict[str, Any]], float], dict[str, Any]]


def new_job_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


#: How long a job may go unheard (no heartbeat, no state change) past its sync timeout before
#: ``--resume`` treats it as interrupted rather than still running.
STALE_GRACE_S = 60.0


def preflight(
    job: JobSpec, *, check_channel: bool = True, dataset_version: str | None = None
) -> tuple[Channel, Manifest]:
    """Fail fast, with one line, on what would otherwise fail inside every worker."""
    store = open_storage(job.storage)
    manifest = read_manifest(store, job.dataset, dataset_version)
    shards_of_worker(manifest, 0, job.workers)
    from lambdaml.models import MODELS

    MODELS.get(job.model.name).check_dataset(job.model.name, manifest)
    if check_channel:
        channel = open_channel(job.channel)
        channel.ensure()  # creates the bucket/table on a local stack; only checks it on AWS
        channel.ping()
        channel.close()
    return store, manifest


def begin(
    job: JobSpec, job_id: str | None, *, resume: bool = False, check_channel: bool = True
) -> tuple[Channel, Manifest, Attempt]:
    """Check the job, then claim its id (or, with ``resume``, its next attempt): the one way every job starts.

    A new job trains on the dataset's current version; a resumed one on the version its
    first attempt pinned. Nothing is claimed when a check fails.
    """
    if resume:
        if not job_id:
            raise LambdaMLError("--resume needs the id of the job to continue")
        store = open_storage(job.storage)
        _, manifest = preflight(job, check_channel=check_channel, dataset_version=records.first_version(store, job_id))
        attempt = records.resume_job(store, job, job_id, stale_after_s=job.sync.timeout_s + STALE_GRACE_S)
        if check_channel:  # what an attempt killed outright left on the channel
            clear_job_channel(job, job_id, attempt.number - 1)
        return store, manifest, attempt
    job_id = job_id or new_job_id(job.name)
    store, manifest = preflight(job, check_channel=check_channel)
    return store, manifest, records.claim_job(store, job, job_id, manifest.dataset_version)


def job_secret(job: JobSpec) -> bytes | None:
    """A fresh MAC key for the job's channel values where the channel asks for one (never stored)."""
    return seal.new_secret() if job.channel.authenticates_values else None


def run_job(
    job: JobSpec,
    *,
    job_id: str | None = None,
    backend: str = "local",
    on_event: Callable[[JobEvent], None] | None = None,
    results_dir: str | Path | None = "results",
    resume: bool = False,
) -> dict[str, Any]:
    """Run a job to the end and return its result record (also written to S3 and disk).

    The job's state is recorded as it goes; a failure or an interrupt (Ctrl-C) is recorded
    too, so ``--resume`` can continue the job from its checkpoints.
    """
    runner = BACKENDS.get(backend)()
    store, manifest, attempt = begin(job, job_id, resume=resume, check_channel=runner.uses_channel)
    job_id = attempt.job_id
    started_at = datetime.now(UTC).isoformat()
    started = time.perf_counter()
    try:
        reports = runner.run(job, attempt, secret=job_secret(job) if runner.uses_channel else None, on_event=on_event)
    except (JobFailed, KeyboardInterrupt) as exc:
        ended = records.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else records.FAILED
        records.set_status(store, job_id, attempt.number, ended, error=str(exc) or "interrupted")
        if runner.uses_channel:
            clear_job_channel(job, job_id, attempt.number)
        raise
    wall_s = time.perf_counter() - started
    result = assemble_result(
        job, attempt, manifest, reports, wall_s=wall_s, started_at=started_at, backend=backend, cost=runner.cost
    )
    put_json(store, keys.job_result(job_id), result)
    records.set_status(store, job_id, attempt.number, records.SUCCEEDED, finished_at=time.time())
    return save_result(result, results_dir)


def save_result(result: dict[str, Any], results_dir: str | Path | None) -> dict[str, Any]:
    """Write the result record to ``results_dir/<job id>.json`` (if given) and note where."""
    if results_dir is not None:
        path = Path(results_dir) / f"{result['job_id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))
        result["result_path"] = str(path)
    return result


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


def assemble_result(
    job: JobSpec,
    attempt: Attempt,
    manifest: Manifest,
    reports: list[dict[str, Any]],
    *,
    wall_s: float,
    started_at: str,
    backend: str = "lambda",
    cost: CostFunction | None = None,
) -> dict[str, Any]:
    """The result record: where the model is, the loss curve, the per-worker breakdown.

    ``cost`` prices the run (default: Lambda GB-seconds plus channel requests).
    """
    lead = reports[0]
    checksums = {r["model_checksum"] for r in reports}
    epoch_times = _epoch_times(reports)
    curve = zip(lead["losses"], epoch_times, strict=True)
    workers = [
        {"rank": r["rank"], "rows": r["rows"], **r["times"], "channel": r["channel"], **_optional(r)} for r in reports
    ]
    if cost is None:
        priced = job_cost(job.channel.kind, workers, wall_s, job.storage.region)
    else:
        priced = cost(job, workers, wall_s)
    return {
        "job_id": attempt.job_id,
        "attempt": attempt.number,
        "status": "succeeded",
        "backend": backend,
        "started_at": started_at,
        "finished_at": datetime.now(UTC).isoformat(),
        "wall_time_s": wall_s,
        "spec": job.model_dump(mode="json"),
        "dataset": {
            "name": manifest.name,
            "version": manifest.dataset_version,
            "train_rows": manifest.train_rows,
            "test_rows": manifest.test_rows,
            "classes": manifest.n_classes,
        },
        "model_uri": lead["model_uri"],
        "ranks_agree": len(checksums) == 1,
        "loss_curve": [{"epoch": i + 1, "loss": loss, "elapsed_s": t} for i, (loss, t) in enumerate(curve)],
        "test_accuracy": lead.get("test_accuracy"),
        # What the accuracy is of: the classes it chose among, and what always guessing the
        # most common class would score.
        "classes": lead.get("classes"),
        "majority_accuracy": lead.get("majority_accuracy"),
        "test_loss": lead.get("test_loss"),
        "workers": workers,
        "cost": priced,
    }


def collect_reports(store: Channel, job: JobSpec, attempt: Attempt) -> list[dict[str, Any]]:
    """Every rank's report of an attempt from the data bucket, in rank order (waiting up to the sync timeout)."""
    report_keys = [keys.worker_report(attempt.job_id, attempt.number, r) for r in range(job.workers)]
    found = store.wait_for(report_keys, job.sync.timeout_s)
    return [json.loads(found[k]) for k in report_keys]


def _optional(report: dict[str, Any]) -> dict[str, Any]:
    """ASP statistics, Lambda invocations, epoch end times and memory, for the workers that have them."""
    return {name: report[name] for name in ("async", "billed", "epoch_elapsed_s", "memory") if name in report}


def _epoch_times(reports: list[dict[str, Any]]) -> list[float]:
    times = reports[0].get("epoch_elapsed_s")
    return list(times) if times else [float("nan")] * len(reports[0]["losses"])
