"""A finished job's result: every rank's report gathered into one record, by one function whatever ran it.

Also where results go on disk, and clearing what an attempt left on its channel.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lambdaml import keys
from lambdaml.channels import Channel, open_channel
from lambdaml.config import JobSpec
from lambdaml.cost import job_cost
from lambdaml.data.shards import Manifest
from lambdaml.errors import LambdaMLError
from lambdaml.runtime.records import Attempt

log = logging.getLogger(__name__)

#: Prices a run from its job, per-worker records and wall time (``Backend.cost``).
CostFunction = Callable[[JobSpec, list[dict[str, Any]], float], dict[str, Any]]


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
