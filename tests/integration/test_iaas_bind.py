"""An iaas-local run listens on loopback only: torchrun's store and every rank's gloo sockets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lambdaml.backends.base import JobEvent
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from tests.helpers import Services, channel_spec, unique_name
from tests.proc_tree import LOOPBACK, command_line, descendants_of, listening

pytestmark = pytest.mark.timeout(300)

WORKERS = 2


def test_an_iaas_local_job_listens_on_loopback_only(
    services: Services, data_store: tuple[StorageSpec, Channel], tmp_path: Path
) -> None:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(20_000, seed=3)  # many small rounds: the job runs well past its first epoch
    dataset = unique_name("bind")
    shards.prepare(store, dataset, X, y, shards=WORKERS)
    job = parse_job(
        {
            "name": "bind",
            "workers": WORKERS,
            "dataset": dataset,
            "storage": spec.model_dump(),
            "channel": channel_spec("redis", services).model_dump(),
            "algorithm": {"name": "ga_sgd", "epochs": 3, "batch_size": 10, "lr": 0.1},
            "sync": {"timeout_s": 60},
        }
    )
    seen: list[list[tuple[int, str, int]]] = []

    def on_epoch(event: JobEvent) -> None:
        if seen:
            return
        # The first epoch has ended: torchrun's store and every rank's gloo group are up, and stay
        # up until the ranks finish their last epoch.
        launchers = [pid for pid in descendants_of(os.getpid()) if "--nproc-per-node" in command_line(pid)]
        assert len(launchers) == 1, launchers
        tree = [launchers[0], *descendants_of(launchers[0])]
        seen.append(listening(tree))

    result = run_job(job, backend="iaas-local", results_dir=tmp_path, on_event=on_epoch)
    assert result.ranks_agree and len(result.loss_curve) == 3
    assert seen, "no epoch was reported"
    (sockets,) = seen
    # At least the rendezvous store (torchrun's) and one gloo listener per rank.
    assert len(sockets) >= 1 + WORKERS, sockets
    wide = [(pid, address, port) for pid, address, port in sockets if address not in LOOPBACK]
    assert not wide, f"listening beyond loopback (pid, /proc/net address, port): {wide}"
