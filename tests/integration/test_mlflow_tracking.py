"""A tracked job is one MLflow run, read back through MLflow's own client from a real local store
(sqlite); a tracker that is down costs the job nothing but a warning line; without MLflow a
tracked job is refused before anything is claimed. Jobs are real and tiny: 2 workers, 2 epochs,
on moto's S3."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import cli, keys
from lambdaml.backends import JobEvent
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.storage import get_json, open_storage
from lambdaml.tracking import TrackedRun, track_run
from tests.helpers import Services, unique_name

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORKERS, EPOCHS, DATASET = 2, 2, "tracked"


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    X, y, _ = synthetic.higgs_like(240, seed=4)
    shards.prepare(data_store[1], DATASET, X, y, shards=WORKERS, test_fraction=0.25)
    return data_store


@pytest.fixture(autouse=True)
def _nothing_in_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's default artifact root is ./mlruns: run where it can do no harm."""
    monkeypatch.chdir(tmp_path)


def job_data(storage: StorageSpec, name: str, uri: str | None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "workers": WORKERS,
        "dataset": DATASET,
        "storage": storage.model_dump(),
        "channel": {"kind": "memory"},
        "algorithm": {"name": "ga_sgd", "epochs": EPOCHS, "batch_size": 30, "lr": 0.5},
        "sync": {"timeout_s": 30},
        **extra,
    }
    if uri is not None:
        data["tracking"] = {"mlflow": uri}
    return data


def store_at(tmp_path: Path, experiment: str) -> tuple[str, MlflowClient, str]:
    """A fresh sqlite store whose experiment keeps its artifacts under tmp_path."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment(experiment, artifact_location=(tmp_path / "artifacts").as_uri())
    return uri, client, experiment_id


def the_run(client: MlflowClient, experiment_id: str) -> Any:
    runs = client.search_runs([experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return runs[0]


def test_a_tracked_job_is_one_mlflow_run_with_its_parameters_losses_costs_and_onnx_model(
    storage: tuple[StorageSpec, Channel], tmp_path: Path
) -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    spec, store = storage
    name = unique_name("track")
    uri, client, experiment_id = store_at(tmp_path, name)
    tracked: list[TrackedRun] = []

    result = run_job(parse_job(job_data(spec, name, uri)), results_dir=None, on_tracked=tracked.append)

    run = the_run(client, experiment_id)
    run_id = run.info.run_id
    assert tracked == [TrackedRun(run_id, name, uri)]
    assert tracked[0].describe() == f"mlflow: run {run_id} in experiment {name} at {uri}"
    assert (run.info.run_name, run.info.status) == (result.job_id, "FINISHED")
    params = run.data.params
    assert params["job_id"] == result.job_id
    assert (params["dataset"], params["dataset.version"]) == (DATASET, result.dataset.version)
    assert (params["workers"], params["model.name"], params["channel.kind"]) == ("2", "lr", "memory")
    assert (params["algorithm.lr"], params["algorithm.epochs"], params["algorithm.name"]) == ("0.5", "2", "ga_sgd")
    assert params["algorithm.compression"] == "null" and params["sync.protocol"] == "bsp"
    assert not any(key.startswith("tracking") for key in params)
    assert run.data.tags["lambdaml.job_id"] == result.job_id and run.data.tags["lambdaml.backend"] == "local"

    history = sorted(client.get_metric_history(run_id, "loss"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(p.epoch, p.loss) for p in result.loss_curve]
    assert len(history) == EPOCHS
    metrics = run.data.metrics
    assert result.test_accuracy is not None and metrics["test_accuracy"] == result.test_accuracy
    assert metrics["wall_time_s"] == result.wall_time_s
    assert metrics["cost_dollars"] == result.cost["total_dollars"] > 0
    mean_compute = sum(w.times.compute_s for w in result.workers) / WORKERS
    assert metrics["compute_s"] == pytest.approx(mean_compute, rel=1e-12)
    assert {"load_s", "communicate_s", "wait_s"} <= set(metrics)

    assert [a.path for a in client.list_artifacts(run_id, "model")] == ["model/model.onnx"]
    assert list((tmp_path / "artifacts").rglob("model.onnx")), "the artifact is not where the experiment keeps them"
    onnx_path = client.download_artifacts(run_id, "model/model.onnx", str(tmp_path / "download"))
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    test = shards.load_test(store, shards.read_manifest(store, DATASET, result.dataset.version))
    assert test is not None
    X_test, y_test = test
    labels = session.run(["label"], {"X": np.asarray(X_test, dtype=np.float32)})[0]
    from lambdaml.trained import load_model

    np.testing.assert_array_equal(labels, load_model(result, storage=spec).predict(X_test))
    assert len(labels) == len(y_test)


def test_a_torch_model_is_logged_as_safetensors(storage: tuple[StorageSpec, Channel], tmp_path: Path) -> None:
    pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.numpy")
    spec, _ = storage
    name = unique_name("track-mlp")
    uri, client, experiment_id = store_at(tmp_path, name)
    job = parse_job(job_data(spec, name, uri, model={"name": "mlp", "hidden": [8]}))
    run_job(job, results_dir=None)
    run_id = the_run(client, experiment_id).info.run_id
    assert [a.path for a in client.list_artifacts(run_id, "model")] == ["model/model.safetensors"]
    path = client.download_artifacts(run_id, "model/model.safetensors", str(tmp_path / "download"))
    tensors = safetensors.load_file(path)
    assert tensors and all(np.all(np.isfinite(t)) for t in tensors.values())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_tracker_that_is_down_costs_the_job_one_warning_line(
    storage: tuple[StorageSpec, Channel], caplog: pytest.LogCaptureFixture
) -> None:
    spec, store = storage
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    job = parse_job(job_data(spec, unique_name("down"), uri))
    with caplog.at_level(logging.WARNING):
        result = run_job(job, results_dir=None)
    assert result.status == "succeeded" and len(result.loss_curve) == EPOCHS
    assert get_json(store, keys.job_status(result.job_id))["state"] == "succeeded"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings  # MLflow's or urllib3's own lines included
    expected = rf"MLflow tracking at {uri} failed: \[Errno \d+\] Connection refused; the job's result is unaffected"
    assert re.fullmatch(expected, warnings[0]), warnings

    began = time.monotonic()  # the tracking call alone, bounded by its request bounds
    assert track_run(job, result) is None
    assert time.monotonic() - began < 30


def test_a_tracker_that_answers_nothing_is_given_up_on_in_seconds(
    storage: tuple[StorageSpec, Channel], caplog: pytest.LogCaptureFixture
) -> None:
    """A server that accepts connections and never answers (a hung one): the first request times out."""
    spec, _ = storage
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes connections; nothing ever reads or answers them
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        job = parse_job(job_data(spec, unique_name("hung"), uri))
        result = run_job(job, results_dir=None, on_tracked=pytest.fail)
        assert result.status == "succeeded"
        caplog.clear()
        began = time.monotonic()
        with caplog.at_level(logging.WARNING):
            assert track_run(job, result) is None
        assert time.monotonic() - began < 30
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"MLflow tracking at {uri} failed: no answer within 5 s (timed out); the job's result is unaffected"
    ]


def test_a_job_resumed_with_another_tracking_uri_is_the_same_job_and_is_logged(
    storage: tuple[StorageSpec, Channel], tmp_path: Path
) -> None:
    spec, _ = storage
    name = unique_name("resumed")
    uri, client, experiment_id = store_at(tmp_path, name)
    data = job_data(spec, name, "http://127.0.0.1:9", runtime={"checkpoint_every": 1, "margin_s": 0})
    job_id = unique_name("resume")

    def ctrl_c(event: JobEvent) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job(parse_job(data), job_id=job_id, on_event=ctrl_c, results_dir=None)
    resumed = parse_job({**data, "tracking": {"mlflow": uri}})
    result = run_job(resumed, job_id=job_id, resume=True, results_dir=None)
    assert result.attempt == 2 and result.status == "succeeded"
    run = the_run(client, experiment_id)
    assert run.info.run_name == job_id and run.data.tags["lambdaml.attempt"] == "2"


def test_train_mlflow_on_the_command_line_logs_the_run_and_says_which(
    storage: tuple[StorageSpec, Channel], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, _ = storage
    name = unique_name("cli")
    uri, client, experiment_id = store_at(tmp_path, name)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_data(spec, name, None)))  # no tracking block: --mlflow sets it
    job_id = unique_name("cli-job")
    assert cli.main(["train", str(path), "--mlflow", uri, "--job-id", job_id, "--results-dir", str(tmp_path)]) == 0
    run = the_run(client, experiment_id)
    assert run.info.run_name == job_id
    out = capsys.readouterr()
    assert f"mlflow: run {run.info.run_id} in experiment {name} at {uri}" in out.out + out.err


WITHOUT_MLFLOW = textwrap.dedent(
    """
    import sys
    sys.modules["mlflow"] = None  # import mlflow now raises ImportError
    from lambdaml import cli
    sys.exit(cli.main(sys.argv[1:]))
    """
)


def test_without_mlflow_a_tracked_job_is_refused_before_anything_is_claimed(services: Services, tmp_path: Path) -> None:
    spec = StorageSpec(bucket=unique_name("untracked"), endpoint_url=services.moto_url)
    store = open_storage(spec)
    store.ensure()
    X, y, _ = synthetic.higgs_like(120, seed=5)
    shards.prepare(store, DATASET, X, y, shards=WORKERS)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_data(spec, "untracked", None)))
    for flags in (["--mlflow", f"sqlite:///{tmp_path / 'm.db'}"], ["--mlflow", "http://127.0.0.1:9"]):
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_MLFLOW, "train", str(path), *flags, "--results-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 1, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert lines == ["error: tracking.mlflow needs MLflow: pip install 'lambdaml[mlflow]'"], lines
    assert store.list(keys.JOBS_PREFIX) == [], "a job was claimed"
    assert not list(tmp_path.glob("*.json")) and not (tmp_path / "m.db").exists()
