"""Without torch, as in the coordinator (a zip function): every model's job validates and the coordinator
starts a torch job. Torch is made unimportable in a fresh interpreter; S3 is moto."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from lambdaml import catalogue
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic

ROOT = Path(__file__).resolve().parents[2]

NO_TORCH = textwrap.dedent(
    """
    import json, sys
    sys.modules["torch"] = None  # import torch now raises ImportError
    from lambdaml import catalogue
    from lambdaml.config import parse_job
    from lambdaml.platforms.aws_lambda import handlers as lambda_handlers

    jobs = json.loads(sys.argv[1])
    for job in jobs:
        parse_job(job)

    class Recorder:
        events = []
        def invoke_async(self, function, payload):
            self.events.append(payload)

    recorder = Recorder()
    answer = lambda_handlers.coordinate(
        {"action": "start", "job": jobs[0], "worker_function": "worker"}, None, invoker=recorder
    )
    assert answer["state"] == "running", answer
    assert [e["job"]["model"]["name"] for e in recorder.events] == ["mlp"] * jobs[0]["workers"]
    assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None], "torch was imported"
    print("ok", len(jobs))
    """
)


def test_without_torch_every_job_validates_and_the_coordinator_starts_a_torch_job(
    data_store: tuple[StorageSpec, Channel],
) -> None:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(200, seed=1)
    shards.prepare(store, "no-torch", X, y, shards=2, test_fraction=0)
    channel = {"kind": "s3", "bucket": "comm-no-torch", "endpoint_url": spec.endpoint_url}
    base = {"workers": 2, "dataset": "no-torch", "storage": spec.model_dump(), "channel": channel}
    jobs: list[dict[str, object]] = [{**base, "model": {"name": "mlp", "hidden": [8]}}]
    for name in catalogue.MODELS:
        algorithm = "kmeans" if name == "kmeans" else "ga_sgd"
        jobs.append({**base, "model": {"name": name}, "algorithm": {"name": algorithm}})
    for name, info in catalogue.ALGORITHMS.items():
        if name != "kmeans":
            compression = {"name": "onebit"} if info.compression == "required" else None
            jobs.append(
                {**base, "model": {"name": "resnet18"}, "algorithm": {"name": name, "compression": compression}}
            )
    result = subprocess.run(
        [sys.executable, "-c", NO_TORCH, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ok", str(len(jobs))]
