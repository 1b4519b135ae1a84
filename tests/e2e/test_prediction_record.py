"""A job's result records the cost model's prediction it ran under, and ``compare`` and ``jobs``
show how far the measured run fell from it.

Each command runs as a user runs it, in a process of its own with a fresh ``LAMBDAML_HOME``,
against a real moto S3 (the conftest fixture): the job's data, its channel and its records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml.config import StorageSpec
from lambdaml.runtime.prediction_record import AWS_DEFAULTS
from lambdaml.runtime.reports import read_result_file
from tests.helpers import small_dataset_bucket, unique_name

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "job_results"


class User:
    """A fresh user of this machine: their LAMBDAML_HOME and working folder, no AWS settings."""

    def __init__(self, root: Path) -> None:
        self.home, self.cwd = root / "lambdaml-home", root / "work"
        for folder in (self.home, self.cwd):
            folder.mkdir(parents=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env.update(LAMBDAML_HOME=str(self.home))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lambdaml", *args],
            capture_output=True, text=True, timeout=240, cwd=self.cwd, env=self.env,
        )  # fmt: skip

    def train(self, storage: StorageSpec) -> tuple[dict[str, Any], str]:
        """Train a tiny job here: its result as printed, and what the command said on stderr."""
        done = self.run("train", str(self.job_file(storage)), "--output", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), done.stderr

    def job_file(self, storage: StorageSpec) -> Path:
        job: dict[str, Any] = {
            "name": "predicted",
            "workers": 2,
            "dataset": "small",
            "storage": storage.model_dump(),
            "channel": {"kind": "s3", "bucket": unique_name("comm"), "endpoint_url": storage.endpoint_url},
            "algorithm": {"name": "ga_sgd", "epochs": 1, "batch_size": 50},
            "sync": {"timeout_s": 20},
        }
        path = self.cwd / "job.yaml"
        path.write_text(yaml.safe_dump(job))
        return path


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


@pytest.fixture(scope="module")
def storage(moto_url: str) -> StorageSpec:
    """A moto bucket holding a small dataset."""
    return small_dataset_bucket(moto_url)


def test_a_local_job_records_its_prediction_and_compare_and_jobs_show_the_error(
    user: User, storage: StorageSpec
) -> None:
    printed, said = user.train(storage)
    prediction = printed["prediction"]
    # No profile was calibrated for this machine: the shipped defaults, and said so.
    assert prediction["profile"] == AWS_DEFAULTS
    assert prediction["configuration"].startswith("FaaS 2 x Lambda (s3, ")
    assert 0 < prediction["time_low_s"] <= prediction["time_s"] <= prediction["time_high_s"]
    assert 0 < prediction["cost_low"] <= prediction["cost"] <= prediction["cost_high"]
    assert "unpredicted" not in printed and "no prediction" not in said

    result_file = user.cwd / "results" / f"{printed['job_id']}.json"
    result = read_result_file(result_file)
    assert result.prediction is not None and result.prediction.time_s == prediction["time_s"]
    ratio = result.wall_time_s / result.prediction.time_s
    cost_ratio = result.cost["total_dollars"] / result.prediction.cost

    old = FIXTURES / "higgs-lr-local.json"  # written before predictions were recorded
    compared = user.run("compare", str(result_file), str(old))
    assert compared.returncode == 0, compared.stderr
    table = compared.stdout[compared.stdout.index("measured against predicted") :]
    mine, theirs = (next(line for line in table.splitlines() if tail in line) for tail in ("predicted", "local s3"))
    row = next(line for line in table.splitlines() if printed["job_id"].rsplit("-", 1)[-1] in line)
    assert f"{ratio:.2f}" in row.split() and f"{cost_ratio:.2f}" in row.split(), table
    assert mine and theirs
    assert any("no prediction" in line for line in table.splitlines()), table

    listed = user.run("jobs")
    assert listed.returncode == 0, listed.stderr
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(printed["job_id"][:20])]
    assert "x pred" in listed.stdout and line.split()[-1].rstrip("!") == f"{ratio:.2f}", listed.stdout
    as_json = user.run("jobs", "--output", "json")
    (summary,) = json.loads(as_json.stdout)
    assert summary["time_vs_predicted"] == pytest.approx(ratio)


def test_a_calibrated_profile_of_this_machine_is_the_one_predicted_from(user: User, storage: StorageSpec) -> None:
    profile = user.home / "profiles" / "local.json"
    profile.parent.mkdir(parents=True)
    # A profile that changes one figure: the local start-up, so its prediction differs from the defaults'.
    profile.write_text(json.dumps({"version": 1, "target": "local", "faas": {"cold_start_s": {"numpy": 40.0}}}))
    done = user.run("train", str(user.job_file(storage)))  # as a table: the prediction is said after it
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("predicted ")]
    assert f"from the calibrated profile {profile}; measured " in line, line
    result = read_result_file(next((user.cwd / "results").glob("*.json")))
    assert result.prediction is not None and result.prediction.profile == f"calibrated profile {profile}"
    assert result.prediction.time_s > 40.0  # the calibrated start-up is in it
    assert f"measured {result.wall_time_s / result.prediction.time_s:.2f}x the time" in line, line


def test_a_job_the_model_cannot_predict_runs_and_says_why_once(user: User, storage: StorageSpec) -> None:
    profile = user.home / "profiles" / "local.json"
    profile.parent.mkdir(parents=True)
    profile.write_text("{not json")  # this machine's profile is damaged: no prediction, but the job runs
    printed, said = user.train(storage)
    assert "prediction" not in printed
    assert "not a JSON profile" in printed["unpredicted"]
    assert said.count("no prediction for this job") == 1, said
    assert printed["status"] == "succeeded" and printed["loss_curve"]

    listed = user.run("jobs")
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(printed["job_id"][:20])]
    assert line.split()[-1] == "-"  # no prediction, no error to show


def test_an_older_result_reads_as_having_no_prediction() -> None:
    result = read_result_file(FIXTURES / "higgs-lr-local.json")
    assert result.prediction is None and result.unpredicted is None
    assert "prediction" not in result.to_json()
