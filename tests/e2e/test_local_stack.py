"""The serverless path end to end on the local stack: the template created on moto, the
functions run by the local Lambda service, and a job started with boto3 through
``lambdaml train --stack`` ending with the local-process backend's model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import codec, keys
from lambdaml.backends import stack as remote
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.local import stack
from lambdaml.runtime.reports import JobResult

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / ".venv-sam" / "bin" / "python").exists(), reason="needs the SAM tool venv: make sam-env"
)


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    home = tmp_path_factory.mktemp("lambdaml-home")
    previous = os.environ.get("LAMBDAML_HOME")
    os.environ["LAMBDAML_HOME"] = str(home)
    try:
        record = stack.up("e2e", cache="redis")
        try:
            yield "e2e", record
        finally:
            stack.down("e2e")
    finally:
        if previous is None:
            os.environ.pop("LAMBDAML_HOME", None)
        else:
            os.environ["LAMBDAML_HOME"] = previous


JOB = {
    "name": "e2e-lr",
    "workers": 4,
    "dataset": "higgs",
    "channel": {"kind": "redis"},
    "algorithm": {"name": "ga_sgd", "lr": 0.5, "batch_size": 50, "epochs": 2, "seed": 3},
    "sync": {"timeout_s": 60},
}


def test_job_on_the_local_stack_matches_the_local_process_backend(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, record = local_stack
    deployed = remote.resolve_stack(name)
    store = remote.stack_store(deployed)
    X, y, _ = synthetic.higgs_like(4000, seed=4)
    shards.prepare(store, "higgs", X, y, shards=4)

    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(JOB))
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", "train", str(job_file), "--stack", name, "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    result = JobResult.from_json(json.loads(next(tmp_path.glob("e2e-lr-*.json")).read_text()))
    assert result.ranks_agree
    on_lambda = codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]

    # The same job on the local-process backend, against the same bucket and cache.
    job = remote.bind(JOB, deployed)
    local = run_job(job, results_dir=None)
    np.testing.assert_array_equal(on_lambda, codec.decode_bundle(store.get(keys.job_model(local.job_id)))["params"])

    # Every worker ran as a Lambda invocation; the first ones were cold starts.
    log = [json.loads(line) for line in (Path(record["workdir"]) / "invocations.jsonl").read_text().splitlines()]
    workers = [r for r in log if "WorkerFunction" in r["function"]]
    assert len(workers) >= 4 and all(r["status"] == "success" for r in workers)
    assert any(r["cold"] for r in workers)
    # The result counts the same: one billed entry per worker invocation, cold starts marked.
    assert result.cost["lambda"]["invocations"] == len(workers)
    assert result.cost["lambda"]["cold_starts"] == sum(1 for r in workers if r["cold"])


def test_status_reports_a_finished_job_and_rejects_an_unknown_one(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, _ = local_stack
    store = remote.stack_store(remote.resolve_stack(name))
    job_ids = [k.split("/")[1] for k in store.list("jobs/") if k.endswith("/status.json")]
    assert job_ids, "the previous test left a finished job"
    status = subprocess.run(
        [sys.executable, "-m", "lambdaml", "status", job_ids[0], "--stack", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "succeeded" in status.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "lambdaml", "status", "no-such-job", "--stack", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert "no job 'no-such-job'" in missing.stderr
