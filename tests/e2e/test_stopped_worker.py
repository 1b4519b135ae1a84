"""A worker stopped with SIGSTOP cannot hold ``train`` forever: the job fails on its sync
timeout, stopping escalates from SIGTERM (which a stopped process never handles) to SIGKILL,
and the command ends with one line and leaves no worker behind."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml import settings
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from tests.helpers import Services, unique_name
from tests.proc_tree import children_of, command_line, wait_gone, wait_state

ROOT = Path(__file__).resolve().parents[2]
#: Only a guard against a hang: the test waits for what the command prints, never for a time.
HANG_S = 120.0

pytestmark = pytest.mark.timeout(300)


def test_a_stopped_worker_fails_the_job_in_one_line_and_is_killed(
    tmp_path: Path, data_store: tuple[StorageSpec, Channel], services: Services
) -> None:
    spec, store = data_store
    dataset = unique_name("stopped")
    X, y, _ = synthetic.higgs_like(20_000, seed=3)  # many small rounds: the job runs well past its first epoch
    shards.prepare(store, dataset, X, y, shards=2)
    job: dict[str, Any] = {
        "name": "stopped",
        "workers": 2,
        "dataset": dataset,
        "storage": spec.model_dump(),
        "channel": {"kind": "redis", "port": services.redis_port},
        "algorithm": {"name": "ga_sgd", "epochs": 6, "batch_size": 10, "lr": 0.1},
        "sync": {"timeout_s": 5, "pattern": "allreduce"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    argv = [sys.executable, "-m", "lambdaml", "train", str(path), "--results-dir", str(tmp_path / "results")]
    env = {**os.environ, settings.ENV_HOME: str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    train = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out = _read_until(train, rb"epoch\s+1/6")
        workers = [pid for pid in children_of(train.pid) if any("spawn_main" in a for a in command_line(pid))]
        assert len(workers) == 2, workers
        os.kill(workers[1], signal.SIGSTOP)
        assert wait_state(workers[1], "T", HANG_S) == "T"
        rest, err = train.communicate(timeout=HANG_S)
    finally:
        if train.returncode is None:  # hung (the bug): leave nothing of it running
            with contextlib.suppress(ProcessLookupError):
                os.killpg(train.pid, signal.SIGKILL)
            train.wait(timeout=HANG_S)
    errors = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    assert train.returncode == 1, (out + rest, errors)
    assert len(errors) == 1 and errors[0].startswith("error:"), errors
    assert "Traceback" not in err.decode(errors="replace")
    assert not wait_gone(workers, HANG_S), f"workers {workers} outlived the command"


def _read_until(process: subprocess.Popen[bytes], pattern: bytes) -> bytes:
    """What the command prints on stdout until ``pattern`` shows (it must, within HANG_S)."""
    assert process.stdout is not None
    out, deadline = b"", time.monotonic() + HANG_S
    while not re.search(pattern, out):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {pattern!r} within {HANG_S:g}s: {out!r}"
        ready, _, _ = select.select([process.stdout], [], [], min(remaining, 1.0))
        if ready:
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"the command ended before {pattern!r}: {out!r}"
            out += chunk
    return out
