"""A diverging model stops its job with a clear "diverged" status before any NaN is written.

The job: logistic regression with a learning rate of 1000 and l2 of 1, so every step multiplies
the weights by about -999 and float64 overflows within one epoch of batch-size-2 steps.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import cli, codec, keys, seal
from lambdaml.channels import Channel, open_channel
from lambdaml.channels.memory import MemoryChannel
from lambdaml.config import JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.platforms.aws_lambda import handlers as lambda_handlers
from lambdaml.storage import get_json
from tests.helpers import Services, channel_spec
from tests.integration.test_lambda_runtime import FakeContext
from tests.lambda_harness import claimed

pytestmark = pytest.mark.timeout(120)

DIVERGING = {"name": "lr", "l2": 1.0}
DIVERGING_ALGORITHM = {"name": "ga_sgd", "lr": 1000.0, "epochs": 3, "batch_size": 2}


@pytest.fixture(scope="module")
def dataset(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(400, seed=3)
    shards.prepare(store, "diverging", X, y, shards=2)
    return spec, store


def job_data(storage: StorageSpec, channel: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "div",
        "workers": 2,
        "dataset": "diverging",
        "storage": storage.model_dump(),
        "channel": channel,
        "model": DIVERGING,
        "algorithm": DIVERGING_ALGORITHM,
        "sync": {"timeout_s": 5},
    }


def job_objects(store: Channel, job_id_prefix: str) -> list[str]:
    return sorted(k for k in store.list("jobs/") if k.startswith(f"jobs/{job_id_prefix}"))


def test_cli_run_stops_with_one_line_and_writes_no_nan(
    dataset: tuple[StorageSpec, Channel],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage, store = dataset
    written: list[tuple[str, bytes]] = []
    put = MemoryChannel._put

    def recording_put(self: MemoryChannel, key: str, data: bytes) -> None:
        written.append((key, bytes(data)))
        put(self, key, data)

    monkeypatch.setattr(MemoryChannel, "_put", recording_put)  # the workers run as threads of this process
    path = tmp_path / "diverging.yaml"
    path.write_text(yaml.safe_dump(job_data(storage, {"kind": "memory"})))

    code = cli.main(["train", str(path), "--job-id", "div-cli", "--results-dir", str(tmp_path / "results")])

    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and "diverged" in err[0] and "learning rate" in err[0], err
    # The channel carried real rounds, and every value on it was finite.
    tensors = [
        codec.decode(data[seal.OVERHEAD :])
        for key, data in written
        if data[: seal.OVERHEAD][:4] == seal.MAGIC and data[seal.OVERHEAD : seal.OVERHEAD + 4] == codec.MAGIC
    ]
    assert len(tensors) >= 10
    assert all(np.isfinite(t).all() for t in tensors)
    # No model, no result: only the job's records (its claim, attempt and failed state).
    written_keys = job_objects(store, "div-cli")
    assert keys.job_model("div-cli") not in written_keys and keys.job_result("div-cli") not in written_keys
    assert {keys.job_spec("div-cli"), keys.job_status("div-cli")} <= set(written_keys)
    assert get_json(store, keys.job_status("div-cli"))["state"] == "failed"
    assert not (tmp_path / "results").exists()


def test_lambda_job_status_says_diverged_and_the_channel_is_left_clean(
    dataset: tuple[StorageSpec, Channel], services: Services
) -> None:
    storage, store = dataset
    job: JobSpec = parse_job(job_data(storage, channel_spec("redis", services).model_dump()))
    job_id = "div-lambda"
    attempt = claimed(store, job, job_id)
    answers: dict[int, dict[str, Any]] = {}

    def invoke(rank: int) -> None:
        event = lambda_handlers.worker_event(job, attempt, rank, "worker")
        answers[rank] = lambda_handlers.work(event, FakeContext("worker", 10**9))

    threads = [threading.Thread(target=invoke, args=(rank,)) for rank in range(job.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    status = get_json(store, keys.job_status(job_id))
    assert status["state"] == "failed" and status["reason"] == "diverged", status
    assert "diverged" in status["error"]
    assert {a["status"] for a in answers.values()} == {"failed"}
    assert keys.job_model(job_id) not in store.list(f"jobs/{job_id}/")
    for rank in range(job.workers):  # no heartbeat ever carried a NaN loss
        beat = store.get_many([keys.worker_heartbeat(job_id, 1, rank)])
        assert all(np.isfinite(get_json(store, k)["loss"]) for k in beat)
    with open_channel(job.channel) as channel:
        assert channel.list(keys.comm_prefix(job_id)) == []
