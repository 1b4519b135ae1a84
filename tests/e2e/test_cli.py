"""The ``lambdaml`` command as a user runs it: the demo, and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml.config import StorageSpec
from lambdaml.local.services import free_port
from tests.helpers import Services, small_dataset_bucket


def lambdaml(*args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


@pytest.fixture(scope="module")
def small_dataset(services: Services) -> StorageSpec:
    return small_dataset_bucket(services.moto_url)


def job_file(tmp_path: Path, storage: StorageSpec, services: Services, **changes: Any) -> Path:
    job: dict[str, Any] = {
        "name": "cli",
        "workers": 2,
        "dataset": "small",
        "storage": storage.model_dump(),
        "channel": {"kind": "redis", "port": services.redis_port},
        "algorithm": {"name": "ga_sgd", "epochs": 1, "batch_size": 50},
        "sync": {"timeout_s": 10},
    }
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = job
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_train_runs_and_writes_result(tmp_path: Path, small_dataset: StorageSpec, services: Services) -> None:
    result = lambdaml("train", str(job_file(tmp_path, small_dataset, services)), "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "epoch   1/1" in result.stdout
    assert "test accuracy" in result.stdout
    assert len(list(tmp_path.glob("cli-*.json"))) == 1


def test_train_output_json_is_the_result_alone_on_stdout(
    tmp_path: Path, small_dataset: StorageSpec, services: Services
) -> None:
    path = job_file(tmp_path, small_dataset, services, channel={"kind": "memory"})
    result = lambdaml("train", str(path), "--results-dir", str(tmp_path), "--output", "json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded" and record["result_path"] == str(next(tmp_path.glob("cli-*.json")))
    assert "epoch   1/1" in result.stderr  # progress goes to stderr while stdout carries the JSON


def test_train_quiet_prints_the_result_without_progress(
    tmp_path: Path, small_dataset: StorageSpec, services: Services
) -> None:
    path = job_file(tmp_path, small_dataset, services, channel={"kind": "memory"})
    result = lambdaml("train", str(path), "--results-dir", str(tmp_path), "-q")
    assert result.returncode == 0, result.stderr
    assert "epoch" not in result.stdout and "training" not in result.stdout and result.stderr == ""
    assert "time and traffic per worker" not in result.stdout and "rank" not in result.stdout  # a detail
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["test", "job", "cost", "result:"], result.stdout


def test_malformed_job_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: demo\nalgorithm: {lr: 0.1\n")
    assert_one_line_error(lambdaml("train", str(path)), "not valid YAML", "bad.yaml")


def test_unknown_algorithm(tmp_path: Path, small_dataset: StorageSpec, services: Services) -> None:
    path = job_file(tmp_path, small_dataset, services, algorithm__name="adamw")
    assert_one_line_error(lambdaml("train", str(path)), "algorithm.name", "unknown algorithm 'adamw'", "ga_sgd")


def test_dataset_missing_in_s3(tmp_path: Path, small_dataset: StorageSpec, services: Services) -> None:
    path = job_file(tmp_path, small_dataset, services, dataset="nowhere")
    assert_one_line_error(lambdaml("train", str(path)), "dataset 'nowhere' not found", "current.json")


@pytest.mark.parametrize("kind", ["redis", "memcached", "s3", "dynamodb"])
def test_unreachable_channel(tmp_path: Path, small_dataset: StorageSpec, services: Services, kind: str) -> None:
    dead = free_port()  # nothing listens here
    channel: dict[str, Any] = {"kind": kind, "connect_timeout_s": 1}
    if kind in ("redis", "memcached"):
        channel["port"] = dead
    else:
        channel.update(endpoint_url=f"http://127.0.0.1:{dead}", bucket="comm", table="comm")
        channel.pop({"s3": "table", "dynamodb": "bucket"}[kind])
    path = job_file(tmp_path, small_dataset, services, channel=channel)
    started = time.monotonic()
    result = lambdaml("train", str(path))
    assert_one_line_error(result, str(dead))
    assert "reach" in result.stderr or "connect" in result.stderr.lower()
    assert time.monotonic() - started < 30


def test_demo(tmp_path: Path) -> None:
    result = lambdaml("demo", "--workers", "2", "--epochs", "2", "--rows", "6000", timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "(falling)" in result.stdout
    accuracy = float(result.stdout.rsplit("test accuracy", 1)[1].split()[0])
    assert accuracy > 0.8
    last = result.stdout.strip().splitlines()[-4:]
    assert last[0] == "next, the tour in README.md:" and "--stack local" in last[1] and "advise" in last[3]


def test_numpy_path_never_imports_torch(tmp_path: Path, small_dataset: StorageSpec, services: Services) -> None:
    # The in-memory channel runs the workers as threads, so this process sees every import.
    path = job_file(tmp_path, small_dataset, services, channel={"kind": "memory"})
    code = (
        "import sys; from lambdaml.config import load_job; from lambdaml.driver import run_job;"
        f"run_job(load_job({str(path)!r}), results_dir=None);"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_demo_too_small_for_a_test_split_says_so(tmp_path: Path) -> None:
    """``demo --workers 1 --rows 2`` holds out no test row: it says so rather than a TypeError traceback."""
    result = lambdaml("demo", "--workers", "1", "--rows", "2", "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no test rows to score (use more --rows)" in result.stdout and "Traceback" not in result.stderr
