"""``lambdaml train`` as a user runs it, for what it prints along the way: progress at least every
10 s off a terminal while a long epoch runs; a resumed job's epochs going on from where they
stopped, and its time over all its attempts; nothing before the error of a job refused at start;
and the cost of a cancelled job, estimated from its run time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import cli, keys
from lambdaml.backends import JobEvent
from lambdaml.backends.local import LocalBackend
from lambdaml.channels import Channel
from lambdaml.cli.output import ESTIMATED, jobs_table
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.errors import JobCancelled
from lambdaml.platforms.aws_lambda import handlers as lambda_handlers
from lambdaml.runtime import records
from lambdaml.runtime.registry import JobRecord
from lambdaml.storage import get_json
from tests.helpers import Services, channel_spec, unique_name
from tests.lambda_harness import FakeContext, claimed, invoker

#: Off a terminal a line comes at least every 10 s; the test allows for a loaded machine.
MAX_GAP_S = 15.0


@pytest.fixture(scope="module")
def datasets(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(4000, seed=0)
    shards.prepare(store, "long", X, y, shards=2)  # 1,600 training rows a worker
    X, y, _ = synthetic.higgs_like(400, seed=1)
    shards.prepare(store, "short", X, y, shards=2)  # 160 a worker
    rng = np.random.default_rng(0)
    shards.prepare(store, "ten", rng.normal(size=(300, 6)), rng.integers(0, 10, 300).astype(np.float64), shards=2)
    return spec, store


def job_data(
    storage: StorageSpec, services: Services, kind: str, dataset: str = "short", **algorithm: Any
) -> dict[str, Any]:
    channel = channel_spec(kind, services).model_dump(mode="json", exclude_none=True)
    return {
        "name": "progress",
        "workers": 2,
        "dataset": dataset,
        "storage": storage.model_dump(mode="json"),
        "channel": channel,
        "algorithm": {"name": "ga_sgd", "lr": 0.5, "seed": 1, **algorithm},
        "sync": {"timeout_s": 30},
    }


def lambdaml(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=timeout)


def test_a_long_epoch_shows_progress_at_least_every_10s_off_a_terminal(
    tmp_path: Path, datasets: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, _ = datasets
    # One epoch of 534 rounds over S3 on moto: some 20 to 40 s here, with nothing to print but progress.
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_data(spec, services, "s3", "long", epochs=1, batch_size=3)))
    command = [sys.executable, "-m", "lambdaml", "train", str(path), "--results-dir", str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines: list[tuple[float, str]] = []
    try:
        for line in process.stdout:  # a pipe: not a terminal
            lines.append((time.monotonic(), line.rstrip("\n")))
        assert process.wait(timeout=300) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
    texts = [text for _, text in lines]
    start = next(i for i, text in enumerate(texts) if text.startswith("job progress-"))
    end = next(i for i, text in enumerate(texts) if text.startswith("  epoch   1/1  loss "))
    assert end > start + 1, "no progress line while the epoch ran:\n" + "\n".join(texts)
    gaps = [b[0] - a[0] for a, b in zip(lines[start:end], lines[start + 1 : end + 1], strict=True)]
    assert max(gaps) <= MAX_GAP_S, list(zip(gaps, texts[start + 1 : end + 1], strict=True))
    shown = texts[start + 1 : end]
    plain = re.compile(r"  epoch 1/1  (round \d+/534|waiting for the workers' first rounds)  .*")
    full = re.compile(r"  epoch 1/1  round \d+/534  [\d.]+ rounds/s  ETA \S+  ~\$[\d.]+ so far \(est\.\)")
    assert all(plain.fullmatch(s) for s in shown) and any(full.fullmatch(s) for s in shown), shown
    assert texts.count(texts[end]) == 1 and sum(t.startswith("  epoch   ") for t in texts) == 1


def test_a_resumed_job_goes_on_from_its_epoch_and_reports_the_time_of_both_attempts(
    tmp_path: Path, datasets: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = datasets
    # 4 rounds an epoch, a checkpoint every epoch: once rank 0 has ended epoch 3, every rank holds round 8's.
    data = job_data(spec, services, "s3", epochs=5, batch_size=40)
    data["runtime"] = {"checkpoint_every": 4}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    job_id = unique_name("resumed")

    def ctrl_c(event: JobEvent) -> None:
        if event.rank == 0 and event.epoch == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_job(parse_job(data), job_id=job_id, on_event=ctrl_c, results_dir=None)

    done = lambdaml("train", str(path), "--resume", job_id, "--results-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    epochs = [int(m.group(1)) for m in re.finditer(r"^  epoch +(\d+)/5  loss ", done.stdout, re.MULTILINE)]
    assert epochs and 3 <= epochs[0] <= 5 and epochs == list(range(epochs[0], 6)), done.stdout
    assert done.stdout.startswith(f"resuming {job_id}: training lr with ga_sgd on 2 workers over s3"), done.stdout
    result = json.loads((tmp_path / f"{job_id}.json").read_text())
    earlier_s = records.read_attempt(store, job_id, 2).earlier_s  # the first attempt's, to its interruption
    assert result["attempt"] == 2 and earlier_s > 0
    assert result["attempts_wall_time_s"] == pytest.approx(earlier_s + result["wall_time_s"])
    took = re.search(r"finished in ([\d.]+)s \(([\d.]+)s over 2 attempts\)", done.stdout)
    assert took is not None, done.stdout
    assert float(took.group(2)) == pytest.approx(result["attempts_wall_time_s"], abs=0.06)
    assert float(took.group(1)) == pytest.approx(result["wall_time_s"], abs=0.06)
    assert get_json(store, keys.job_status(job_id))["state"] == "succeeded"


def test_a_job_refused_at_its_start_prints_its_error_alone(
    tmp_path: Path, datasets: tuple[StorageSpec, Channel], services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, _ = datasets
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_data(spec, services, "redis", "ten", epochs=1)))
    assert cli.main(["train", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # not the "training lr ... on 2 workers" header
    assert captured.err == (
        "error: model 'lr' is binary, but dataset 'ten' has 10 classes; use model: softmax (or multiclass_svm)\n"
    )


def test_a_cancelled_local_job_records_what_it_cost_up_to_then(
    datasets: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = datasets
    data = job_data(spec, services, "s3", epochs=50, batch_size=40)
    data["runtime"] = {"heartbeat_every_s": 0}  # every epoch's beat reads the cancel marker
    job = parse_job(data)
    job_id = unique_name("cancelled")

    def cancel_after_the_first_epoch(event: JobEvent) -> None:
        if event.rank == 0 and event.epoch == 1:
            LocalBackend(job.storage).cancel(job_id)  # what `lambdaml cancel` does, from another terminal

    started = time.monotonic()
    with pytest.raises(JobCancelled):
        run_job(job, job_id=job_id, on_event=cancel_after_the_first_epoch, results_dir=None)
    ran_s = time.monotonic() - started
    status = records.status(store, job_id)
    assert status["state"] == "cancelled" and status["cost_estimated"] is True
    # Two workers of 3,008 MB for at most the time the job ran, at the GB-second price.
    assert 0 < status["cost_dollars"] <= ran_s * 2 * 3008 / 1024 * 0.0000166667 * 1.01
    summary = JobRecord.from_status(job_id, status).summary(time.time())
    table = jobs_table([summary], now=time.time())
    assert table.caption is not None and str(table.caption) == ESTIMATED
    assert next(iter(table.columns[-1].cells)).startswith("~$")


def test_a_stack_job_cancelled_through_its_coordinator_records_what_it_cost_up_to_then(
    datasets: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = datasets
    job = parse_job(job_data(spec, services, "redis", epochs=1))
    job_id = unique_name("stack-cancel")
    attempt = claimed(store, job, job_id)  # as the coordinator claims it; its workers would be running
    time.sleep(0.2)
    event = {"action": "cancel", "job_id": job_id, "job": job.model_dump(mode="json")}
    answer = lambda_handlers.coordinate(event, FakeContext("coordinator", 10**9), invoker=invoker())
    assert answer["state"] == "cancelled" and answer["cost_estimated"] is True
    ran_s = time.time() - attempt.started_at
    assert 0 < answer["cost_dollars"] <= ran_s * 2 * 3008 / 1024 * 0.0000166667
