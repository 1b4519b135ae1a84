"""A local ``train`` killed outright (SIGKILL of it and its workers) records no ending (issue 42, item 6).

Its job must still be found to have stopped, by this machine's record of the process that ran it,
and then be resumable to the model the uninterrupted job makes, cancellable without a stack, and
cleaned. The kill lands once the first epoch's line shows: a point in the job, not a time.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from lambdaml import keys, settings
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.runtime import records
from lambdaml.runtime.machine_jobs import MachineRegistry
from tests.e2e.test_interrupt import EPOCHS, Terminal, assert_gone, job_file, lambdaml
from tests.helpers import Services, unique_name
from tests.proc_tree import descendants_of


@pytest.fixture(autouse=True)
def _own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.ENV_HOME, str(tmp_path / "home"))


@pytest.fixture(scope="module")
def storage(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    X, y, _ = synthetic.higgs_like(20_000, seed=3)
    shards.prepare(data_store[1], "interrupt", X, y, shards=2)  # the name job_file trains on
    return data_store


def killed_after_the_first_epoch(path: str, job_id: str, results: Path) -> None:
    """Run ``train``, then SIGKILL it and every process it started once its first epoch's line shows."""
    argv = [sys.executable, "-m", "lambdaml", "train", path, "--job-id", job_id, "--results-dir", str(results)]
    with Terminal(argv) as terminal:
        terminal.read_until(rf"epoch\s+1/{EPOCHS}\s+loss")
        started = descendants_of(terminal.pid)
        for pid in [terminal.pid, *started]:
            os.kill(pid, signal.SIGKILL)
        terminal.wait()
    assert_gone(started)


def test_a_killed_train_resumes_to_the_uninterrupted_model(
    tmp_path: Path, storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    path = str(job_file(tmp_path, spec, services))
    job_id = unique_name("killed")
    killed_after_the_first_epoch(path, job_id, tmp_path)
    assert records.status(store, job_id)["state"] == records.RUNNING  # nothing recorded its end

    resumed = lambdaml("train", path, "--resume", job_id, "--results-dir", str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    assert records.read_attempt(store, job_id, 2).resume is not None, "the resumed job started over"
    assert records.status(store, job_id)["state"] == records.SUCCEEDED

    whole_id = unique_name("whole")
    whole = lambdaml("train", path, "--job-id", whole_id, "--results-dir", str(tmp_path))
    assert whole.returncode == 0, whole.stderr
    assert store.get(keys.job_model(job_id)) == store.get(keys.job_model(whole_id))


def test_a_killed_train_is_cancelled_without_a_stack_and_then_cleaned(
    tmp_path: Path, storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    path = str(job_file(tmp_path, spec, services))
    job_id = unique_name("killed")
    killed_after_the_first_epoch(path, job_id, tmp_path)

    cancelled = lambdaml("cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"job {job_id} on this machine: cancelled"), cancelled.stdout
    assert records.status(store, job_id)["state"] == records.CANCELLED
    assert MachineRegistry().job(job_id).record.state == records.CANCELLED  # type: ignore[union-attr]

    cleaned = lambdaml("clean", "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url), "--older-than", "0s")
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"job {job_id}: removed" in cleaned.stdout
    assert not store.list(keys.attempt_prefix(job_id, 1)), "clean left the killed job's checkpoints"


def test_clean_finds_a_killed_train_ended(
    tmp_path: Path, storage: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = storage
    path = str(job_file(tmp_path, spec, services))
    job_id = unique_name("killed")
    killed_after_the_first_epoch(path, job_id, tmp_path)
    cleaned = lambdaml("clean", "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url), "--older-than", "0s")
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"job {job_id}: removed" in cleaned.stdout
    assert records.status(store, job_id)["state"] == records.INTERRUPTED
