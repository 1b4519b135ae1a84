"""An algorithm defined outside the lambdaml package (tests/plugins/ga_sgd_variant.py: GA-SGD with a
learning-rate ``decay``), installed as a package declaring it in the ``lambdaml.plugins`` entry-point
group and reached through nothing else.

Every process of the command line finds it, the spawned workers included: a job naming it checks its
own field and refuses others, it trains to GA-SGD's model bit for bit when its decay is 0 (and to
another model when not), and ``lambdaml advise`` lists and predicts it. This test process never
registers it, so no other test sees it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import catalogue, codec, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from tests.helpers import Services, unique_name
from tests.plugins.ga_sgd_variant import NAME

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
DATASET = "plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a machine where a package declaring the variant is installed: its
    distribution metadata on the path, as pip would leave it."""
    site = tmp_path_factory.mktemp("site")
    dist_info = site / "lambdaml_ga_sgd_decay-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: lambdaml-ga-sgd-decay\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{catalogue.ENTRY_POINT_GROUP}]\n{NAME} = tests.plugins.ga_sgd_variant:DESCRIPTION\n"
    )
    path = os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture(scope="module")
def store(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    X, y, _ = synthetic.higgs_like(900, seed=4)
    shards.prepare(data_store[1], DATASET, X, y, shards=WORKERS)
    return data_store


def lambdaml(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=240, cwd=ROOT, env=env
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def job_file(tmp_path: Path, storage: StorageSpec, services: Services, algorithm: dict[str, Any]) -> str:
    job = {
        "name": "plugin",
        "workers": WORKERS,
        "dataset": DATASET,
        "storage": storage.model_dump(mode="json"),
        "channel": {"kind": "redis", "port": services.redis_port},  # workers in processes of their own
        "model": {"name": "lr", "l2": 1e-3},
        "algorithm": {"epochs": 2, "batch_size": 40, "lr": 0.5, "seed": 1, **algorithm},
        "sync": {"timeout_s": 60, "pattern": "allreduce"},
    }
    path = tmp_path / f"{unique_name('job')}.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def advise(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = lambdaml(env, "advise", *args, "--workers", "2,4", "--instances", "c5.large", "--output", "json")
    assert result.returncode == 0, result.stderr
    advice: dict[str, Any] = json.loads(result.stdout)
    return advice


def test_only_the_installed_package_makes_the_name_known(installed: dict[str, str]) -> None:
    bare = {**installed, "PYTHONPATH": str(ROOT)}
    assert NAME not in lambdaml(bare, "advise", "--help").stdout
    assert NAME in lambdaml(installed, "advise", "--help").stdout  # among --algorithm's choices
    assert NAME not in catalogue.ALGORITHMS  # this process never installed it


def test_a_job_naming_it_takes_its_own_field_and_no_unknown_one(
    tmp_path: Path, installed: dict[str, str], store: tuple[StorageSpec, Channel], services: Services
) -> None:
    storage = store[0]
    data = ("--samples", "1e5", "--features", "28")  # the data's size given: the job's storage is not read

    def refused(algorithm: dict[str, Any]) -> str:
        path = job_file(tmp_path, storage, services, algorithm)
        return error_line(lambdaml(installed, "advise", "--job", path, *data))

    decaying = advise(installed, "--job", job_file(tmp_path, storage, services, {"name": NAME, "decay": 0.5}), *data)
    assert decaying["workload"]["algorithm"] == NAME
    assert "algorithm.clip: unknown field" in refused({"name": NAME, "clip": 1.0})
    assert "algorithm.decay: unknown field" in refused({"name": "ga_sgd", "decay": 0.5})  # its field, nobody else's
    assert "algorithm.decay: Input should be greater than or equal to 0" in refused({"name": NAME, "decay": -1.0})


def test_it_is_advised_from_its_description_as_ga_sgd_is(installed: dict[str, str]) -> None:
    data = ("--model", "lr", "--samples", "1e5", "--features", "28", "--channels", "redis,s3")
    variant, plain = (advise(installed, "--algorithm", name, *data) for name in (NAME, "ga_sgd"))
    assert variant["workload"]["algorithm"] == NAME and variant["rows"]
    assert all(math.isfinite(row["time_s"]) and row["time_s"] > 0 for row in variant["rows"])
    assert variant["rows"] == plain["rows"]  # it exchanges every step and checkpoints the parameters alone


def test_it_trains_to_ga_sgds_model_when_its_decay_is_zero_and_to_another_when_not(
    tmp_path: Path, installed: dict[str, str], store: tuple[StorageSpec, Channel], services: Services
) -> None:
    storage, data = store

    def trained(algorithm: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        job_id = unique_name("plugin")
        path = job_file(tmp_path, storage, services, algorithm)
        result = lambdaml(installed, "train", path, "--job-id", job_id, "--results-dir", str(tmp_path))
        assert result.returncode == 0, result.stderr
        params = codec.decode_bundle(data.get(keys.job_model(job_id)))["params"]
        written: dict[str, Any] = json.loads((tmp_path / f"{job_id}.json").read_text())
        return params, written["spec"]["algorithm"]

    plain, _ = trained({"name": "ga_sgd"})
    neutral, neutral_spec = trained({"name": NAME, "decay": 0.0})
    decayed, decayed_spec = trained({"name": NAME, "decay": 0.5})
    assert np.abs(plain).max() > 0.1, "the model must have moved for the comparison to mean anything"
    np.testing.assert_array_equal(neutral, plain)
    assert np.abs(decayed - plain).max() > 1e-3
    assert (neutral_spec["decay"], decayed_spec["decay"]) == (0.0, 0.5)  # its result records its own field
