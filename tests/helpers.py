"""Helpers shared by contract, integration and end-to-end tests."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np
import pytest

from analytic_model.profile import PROFILE_VERSION
from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.config import ChannelSpec, JobSpec, StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
from lambdaml.models import MODELS, Model
from lambdaml.runtime.records import Attempt
from lambdaml.storage import open_storage

CHANNEL_KINDS = ["memory", "s3", "redis", "memcached", "dynamodb"]


@dataclass(frozen=True)
class Services:
    """Endpoints of the real local services the tests run against (started by conftest)."""

    moto_url: str
    redis_port: int
    memcached_port: int


def unique_name(stem: str = "comm") -> str:
    """A fresh bucket/table/prefix name, so tests never see each other's keys."""
    return f"{stem}-{uuid4().hex[:8]}"


def small_dataset_bucket(moto_url: str, shards_count: int = 2) -> StorageSpec:
    """A fresh moto bucket holding "small": 400 Higgs-like rows in ``shards_count`` shards."""
    spec = StorageSpec(bucket=unique_name("data"), endpoint_url=moto_url)
    store = open_storage(spec)
    store.ensure()
    X, y, _ = synthetic.higgs_like(400, seed=0)
    shards.prepare(store, "small", X, y, shards=shards_count)
    return spec


def unsure_profile(directory: Path) -> Path:
    """A profile unsure of every prediction (``LAMBDAML_PROFILE``): under auto, every candidate
    pattern contends, and a job times them all."""
    path = directory / "unsure.json"
    path.write_text(json.dumps({"version": PROFILE_VERSION, "uncertainty": {"time_fraction": 0.99}}))
    return path


def channel_spec(kind: str, services: Services | None, **overrides: Any) -> ChannelSpec:
    """A ChannelSpec for ``kind`` pointing at the local services; s3/dynamodb get a fresh bucket/table."""
    fields: dict[str, Any] = {"kind": kind, "connect_timeout_s": 2.0}
    if kind != "memory":
        if services is None:
            raise ValueError(f"a {kind} channel spec needs the running services")
        if kind == "s3":
            fields.update(bucket=unique_name(), endpoint_url=services.moto_url)
        elif kind == "dynamodb":
            fields.update(table=unique_name(), endpoint_url=services.moto_url)
        elif kind == "redis":
            fields.update(host="127.0.0.1", port=services.redis_port)
        elif kind == "memcached":
            fields.update(host="127.0.0.1", port=services.memcached_port)
        else:
            raise ValueError(f"unknown channel kind {kind!r}; known: {', '.join(CHANNEL_KINDS)}")
    fields.update(overrides)
    return ChannelSpec(**fields)


def single_process_sgd(
    store: Channel, manifest: shards.Manifest, job: JobSpec, model: Model | None = None
) -> np.ndarray:
    """Mini-batch SGD in one process over the concatenation of what every worker takes each step.

    ``model`` defaults to the one the job names, built for the manifest as a worker builds it.
    """
    spec = job.algorithm
    data = [shards.load_worker_data(store, manifest, r, job.workers) for r in range(job.workers)]
    if model is None:
        model = MODELS.get(job.model.name).build(job.model, manifest)
    params = model.init_params(spec.seed)
    steps = steps_per_epoch(max(len(y) for _, y in data), spec.batch_size)
    for epoch in range(spec.epochs):
        batches = [
            list(
                batch_indices(
                    epoch_order(len(y), epoch=epoch, rank=r, seed=spec.seed, shuffle=True), spec.batch_size, steps
                )
            )
            for r, (_, y) in enumerate(data)
        ]
        for step in range(steps):
            Xb = np.concatenate([X[batches[r][step]] for r, (X, _) in enumerate(data)])
            yb = np.concatenate([y[batches[r][step]] for r, (_, y) in enumerate(data)])
            if len(yb):
                _, grad = model.loss_grad_sum(params, Xb, yb)
                params -= spec.lr * (grad / len(yb) + model.regularizer_grad(params))
    return params


def vouched_shard(store: Channel, manifest: shards.Manifest, index: int, bundle: bytes) -> shards.Manifest:
    """Store ``bundle`` as shard ``index`` and return the manifest vouching for it (size and hash), as a
    forger with write access to the whole dataset would: what is left to refuse it is the decoder."""
    store.put(keys.dataset_shard(manifest.name, manifest.dataset_version, index), bundle)
    sizes, hashes = list(manifest.shard_bytes), list(manifest.shard_hashes)
    sizes[index], hashes[index] = len(bundle), shards.content_hash(bundle)
    return dataclasses.replace(manifest, shard_bytes=sizes, shard_hashes=hashes)


def first_attempt(store: Channel, job: JobSpec, job_id: str) -> Attempt:
    """Attempt 1 of ``job_id`` on the dataset's current version, for tests that call ``run_worker`` directly."""
    version = shards.read_manifest(store, job.dataset).dataset_version
    return Attempt(job_id, 1, version, time.time())


def cli_error_line(argv: list[str], capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    """Run the command in this process: it must fail with exit 1 and one ``error:`` line holding ``fragments``."""
    from lambdaml import cli

    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
