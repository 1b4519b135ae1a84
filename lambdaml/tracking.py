"""Runs tracked in MLflow: a finished job logged as one MLflow run (``tracking: {mlflow: URI}``).

The run is logged once the job has ended, by the process that followed it (``lambdaml.driver``),
never from the workers' loop, so a tracker can neither slow training down nor fail it: each of
its requests is bounded, and any failure is one warning line while the job's result stands.
Whether MLflow is installed is checked before any worker starts (``require_tracker``). MLflow is
an optional extra of the command-line environment, imported only here and only when asked for.

A run holds the job file flattened into parameters (``algorithm.lr``, ``channel.kind``, ...) with
the job id and dataset version, the loss per epoch (metric ``loss``, step = epoch), the test
scores, the time breakdown (wall time; the workers' mean load, compute, communicate and wait),
the cost in dollars, and the model as its ONNX (numpy models) or safetensors (torch) export.
The experiment is the job's name, the run's name its id.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lambdaml.config import JobSpec, StorageSpec
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.runtime.reports import JobResult

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

INSTALL = "pip install 'lambdaml[mlflow]'"
INSTALL_HINT = f"tracking.mlflow needs MLflow: {INSTALL}"

#: MLflow's own bounds on each request, set while a run is logged. Its defaults (a 120 s timeout,
#: 7 retries with exponential backoff) would hold a finished job for minutes on a server that is
#: down; with these, one that refuses connections fails at once, and one that hangs in 5 s (the
#: first request that fails ends the attempt). No retries: urllib3 logs each as a line of its own.
REQUEST_BOUNDS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_ARTIFACT_UPLOAD_DOWNLOAD_TIMEOUT": "60",  # the model file: larger than a request
}
_PARAMS_PER_BATCH, _METRICS_PER_BATCH = 100, 1000  # MLflow's log_batch limits
_MAX_PARAM_CHARS = 6000  # MLflow's limit on a parameter's value
_environment = threading.Lock()  # REQUEST_BOUNDS are process-wide: one run is logged at a time


@dataclass(frozen=True)
class TrackedRun:
    """The MLflow run a job was logged as."""

    run_id: str
    experiment: str
    uri: str

    def describe(self) -> str:
        return f"mlflow: run {self.run_id} in experiment {self.experiment} at {self.uri}"


def tracking_uri(job: JobSpec) -> str | None:
    """The MLflow tracking URI a job is logged to, or None."""
    return None if job.tracking is None else job.tracking.mlflow


def require_tracker(job: JobSpec) -> None:
    """Before any worker starts: a job that asks to be tracked needs MLflow, and what its store needs.

    Only what this machine can tell is checked (a server is not contacted: one that is down
    fails no job). ConfigError, in one line, otherwise.
    """
    uri = tracking_uri(job)
    if uri is None:
        return
    try:
        from mlflow import environment_variables  # a broken install fails here too
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    scheme = uri.partition(":")[0].partition("+")[0]
    if scheme in ("sqlite", "postgresql", "mysql", "mssql"):
        try:  # MLflow's database store; mlflow-skinny leaves them out
            import alembic  # noqa: F401
            import sqlalchemy  # noqa: F401
        except ImportError:
            raise ConfigError(f"tracking.mlflow: a {scheme}: store needs sqlalchemy and alembic: {INSTALL}") from None
    allow = getattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE", None)  # MLflow versions that refuse one
    if scheme == "file" and allow is not None and not allow.get():
        raise ConfigError(
            "tracking.mlflow: this MLflow refuses a file: store unless MLFLOW_ALLOW_FILE_STORE=true; "
            "use a sqlite:///PATH.db store instead"
        )


def track_run(job: JobSpec, result: JobResult, *, storage: StorageSpec | None = None) -> TrackedRun | None:
    """Log a finished job as one MLflow run; None when the job is not tracked or the logging failed.

    Never raises: a tracker that is down, refuses or is not installed is one warning line, and
    the job's result is returned as it is. ``storage`` is where the model is read from (default:
    the job's own data bucket).
    """
    uri = tracking_uri(job)
    if uri is None:
        return None
    try:
        with bounded_requests():
            return _log_run(uri, job, result, storage or job.storage)
    except Exception as exc:  # whatever the tracker does, the job has finished and its result stands
        log.warning("MLflow tracking at %s failed: %s; the job's result is unaffected", uri, reason(exc))
        return None
    except KeyboardInterrupt:  # Ctrl-C while logging stops the logging, not a job that has finished
        log.warning("MLflow tracking at %s interrupted; the job's result is unaffected", uri)
        return None


@contextmanager
def bounded_requests() -> Iterator[None]:
    """MLflow's request timeout and retries bounded (``REQUEST_BOUNDS``) for the block, then restored."""
    with _environment:
        saved = {name: os.environ.get(name) for name in REQUEST_BOUNDS}
        os.environ.update(REQUEST_BOUNDS)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def reason(exc: BaseException) -> str:
    """One short line for a tracker's failure: the network's own words where it was the network
    (MLflow wraps them in a paragraph of URLs), else the first line of the message."""
    if isinstance(exc, ImportError) and (exc.name or "").partition(".")[0] == "mlflow":
        return INSTALL_HINT
    root, seen = exc, {id(exc)}
    while (inner := root.__cause__ or root.__context__) is not None and id(inner) not in seen:
        root = inner
        seen.add(id(root))
    if isinstance(root, TimeoutError):
        return f"no answer within {REQUEST_BOUNDS['MLFLOW_HTTP_REQUEST_TIMEOUT']} s (timed out)"
    if isinstance(root, OSError) and root is not exc and str(root):
        return str(root)  # [Errno 111] Connection refused, [Errno -2] Name or service not known
    text = " ".join((str(exc) or type(exc).__name__).split())
    return text if len(text) <= 300 else text[:297] + "..."


# --- what a run records ------------------------------------------------------------


def params_of(job: JobSpec, result: JobResult) -> dict[str, str]:
    """The job file flattened (``algorithm.lr``), with the job id and the dataset version; tracking aside."""
    spec = {k: v for k, v in job.model_dump(mode="json").items() if k != "tracking"}
    params = _flatten(spec)
    params["job_id"] = result.job_id
    params["dataset.version"] = _text(result.dataset.version)
    params["dataset.train_rows"] = _text(result.dataset.train_rows)
    params["dataset.test_rows"] = _text(result.dataset.test_rows)
    return {name: value[:_MAX_PARAM_CHARS] for name, value in params.items()}


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = _text(value)
    return out


def _text(value: Any) -> str:
    """A parameter's value as the job file would say it: strings as they are, the rest as JSON (true, null, [128])."""
    return value if isinstance(value, str) else json.dumps(value)


def final_metrics(result: JobResult) -> dict[str, float]:
    """The test scores, the time breakdown (the workers' mean of each part) and the cost."""
    out: dict[str, float] = {}
    for name in ("test_accuracy", "test_loss", "majority_accuracy"):
        value = getattr(result, name)
        if value is not None:
            out[name] = float(value)
    out["wall_time_s"] = float(result.wall_time_s)
    if result.workers:
        for part in ("load_s", "compute_s", "communicate_s", "wait_s"):
            out[part] = sum(getattr(w.times, part) for w in result.workers) / len(result.workers)
    total = result.cost.get("total_dollars")
    if isinstance(total, int | float):
        out["cost_dollars"] = float(total)
    return out


def tags_of(result: JobResult) -> dict[str, str]:
    tags = {
        "lambdaml.job_id": result.job_id,
        "lambdaml.backend": result.backend,
        "lambdaml.attempt": str(result.attempt),
        "lambdaml.model_uri": result.model_uri,
    }
    if result.pattern is not None:  # what sync.pattern: auto chose
        tags["lambdaml.pattern"] = result.pattern
    return tags


# --- logging it ----------------------------------------------------------------------


def _log_run(uri: str, job: JobSpec, result: JobResult, storage: StorageSpec) -> TrackedRun:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment_id = _experiment(client, job.name)
    started, finished = _ms(result.started_at), _ms(result.finished_at)
    run = client.create_run(experiment_id, start_time=started, tags=tags_of(result), run_name=result.job_id)
    run_id = run.info.run_id
    params = [Param(name, value) for name, value in params_of(job, result).items()]
    metrics = [
        Metric("loss", point.loss, started + round(point.elapsed_s * 1000), point.epoch) for point in result.loss_curve
    ]
    metrics += [Metric(name, value, finished, 0) for name, value in final_metrics(result).items()]
    for i in range(0, len(params), _PARAMS_PER_BATCH):
        client.log_batch(run_id, params=params[i : i + _PARAMS_PER_BATCH])
    for i in range(0, len(metrics), _METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + _METRICS_PER_BATCH])
    _log_model(client, run_id, result, storage)
    client.set_terminated(run_id, "FINISHED", end_time=finished)
    return TrackedRun(run_id, job.name, uri)


def _experiment(client: MlflowClient, name: str) -> str:
    """The id of the experiment named after the job, created the first time."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is None:
        try:
            return str(client.create_experiment(name))
        except MlflowException:  # created by another job at the same moment
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.lifecycle_stage == "deleted":
        raise LambdaMLError(f"experiment {name!r} is deleted: restore it in MLflow, or rename the job")
    return str(found.experiment_id)


def _log_model(client: MlflowClient, run_id: str, result: JobResult, storage: StorageSpec) -> None:
    """The model as its export (ONNX or safetensors) under the run's ``model/``; a model that cannot be
    exported is a warning, and the run keeps its parameters and metrics."""
    from lambdaml.trained import load_model

    with tempfile.TemporaryDirectory(prefix="lambdaml-mlflow-") as directory:
        try:
            model = load_model(result, storage=storage)
            fmt = model.export_format
            path = model.export(Path(directory) / f"model.{fmt}", fmt)
        except (LambdaMLError, ImportError) as exc:
            log.warning("MLflow run %s: the model was not logged: %s", run_id, reason(exc))
            return
        client.log_artifact(run_id, str(path), artifact_path="model")


def _ms(iso: str) -> int:
    """Milliseconds since the epoch, as MLflow counts time; now for a time that does not parse."""
    try:
        return round(datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return round(datetime.now().timestamp() * 1000)
