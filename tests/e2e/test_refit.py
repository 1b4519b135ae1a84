"""``lambdaml calibrate --from-results DIR``: the target's profile refit from its finished jobs, and
the jobs after it predicted from the refit profile; a directory it cannot refit from is one line.

Each command runs as a user runs it, with a fresh ``LAMBDAML_HOME``, against a real moto S3.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lambdaml.config import StorageSpec
from tests.e2e.test_prediction_record import User
from tests.helpers import small_dataset_bucket


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


@pytest.fixture(scope="module")
def storage(moto_url: str) -> StorageSpec:
    return small_dataset_bucket(moto_url, 2)


def test_a_refit_from_finished_jobs_is_what_later_jobs_are_predicted_from(user: User, storage: StorageSpec) -> None:
    finished = user.cwd / "finished"
    job = str(user.job_file(storage))
    for _ in range(3):
        done = user.run("train", job, "--results-dir", str(finished))
        assert done.returncode == 0, done.stderr
    refit = user.run("calibrate", "--from-results", str(finished))
    assert refit.returncode == 0, refit.stderr
    assert re.search(r"^refit from 3 finished jobs: compute \d+\.\d\dx, s3 rounds \d+\.\d\dx", refit.stdout, re.M)
    errors = re.search(r"median time error on these jobs: (\d+)% before, (\d+)% after", refit.stdout)
    assert errors is not None, refit.stdout
    assert int(errors.group(2)) <= int(errors.group(1))
    profile = user.home / "profiles" / "local.json"
    assert profile.is_file() and str(profile) in refit.stdout
    assert json.loads(profile.read_text())["_source"].startswith("refit from 3 finished jobs in ")

    later = user.run("train", job, "--output", "json")
    assert later.returncode == 0, later.stderr
    assert json.loads(later.stdout)["prediction"]["profile"] == f"calibrated profile {profile}"


def test_too_few_jobs_or_no_directory_is_one_line(user: User, storage: StorageSpec) -> None:
    finished = user.cwd / "finished"
    assert user.run("train", str(user.job_file(storage)), "--results-dir", str(finished)).returncode == 0
    (finished / "notes.json").write_text("{not a result")
    for directory, said in (
        (finished, "a refit takes at least 3 finished jobs of the target, found 1; skipped notes.json: "),
        (user.cwd / "missing", "no such directory of result files"),
    ):
        done = user.run("calibrate", "--from-results", str(directory))
        assert done.returncode == 1 and said in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
    assert not (user.home / "profiles" / "local.json").exists()
