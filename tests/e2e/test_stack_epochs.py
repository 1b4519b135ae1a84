"""A stack's job prints every epoch's line, once and in order, over each channel: its epochs end
several to a heartbeat (the workers beat at most once a second), and the follower still prints
them all. On the local stack: its template on moto, its functions on the local Lambda service."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lambdaml.backends import stack as remote
from lambdaml.data import shards, synthetic
from lambdaml.local import stack

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / ".venv-sam" / "bin" / "python").exists(), reason="needs the SAM tool venv: make sam-env"
)

EPOCHS = 12


@pytest.fixture(scope="module", params=["redis", "memcached"])
def cached_stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local stack with a cache of each kind in turn, holding a tiny dataset."""
    cache: str = request.param
    home = tmp_path_factory.mktemp(f"lambdaml-home-{cache}")
    previous = os.environ.get("LAMBDAML_HOME")
    os.environ["LAMBDAML_HOME"] = str(home)
    name = f"epochs-{cache}"
    try:
        stack.up(name, cache=cache)
        try:
            store = remote.stack_store(remote.resolve_stack(name))
            X, y, _ = synthetic.higgs_like(400, seed=5)
            shards.prepare(store, "tiny", X, y, shards=2)
            yield name
        finally:
            stack.down(name)
    finally:
        if previous is None:
            os.environ.pop("LAMBDAML_HOME", None)
        else:
            os.environ["LAMBDAML_HOME"] = previous


@pytest.mark.parametrize("channel", ["s3", "cache"])
def test_a_stack_job_prints_every_epoch(cached_stack: str, channel: str, tmp_path: Path) -> None:
    cache = cached_stack.removeprefix("epochs-")
    if channel == "s3" and cache == "memcached":
        pytest.skip("S3 is the same on either stack: run on the Redis one")
    kind = cache if channel == "cache" else "s3"
    job = {
        "name": f"epochs-{kind}",
        "workers": 2,
        "dataset": "tiny",
        "channel": {"kind": kind},
        # 4 rounds an epoch: several epochs end within one of the workers' heartbeat seconds.
        "algorithm": {"name": "ga_sgd", "lr": 0.5, "batch_size": 40, "epochs": EPOCHS, "seed": 2},
        "sync": {"timeout_s": 60},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", "train", str(path), "--stack", cached_stack, "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    epochs = [int(m.group(1)) for m in re.finditer(rf"^  epoch +(\d+)/{EPOCHS}  loss ", done.stdout, re.MULTILINE)]
    assert epochs == list(range(1, EPOCHS + 1)), done.stdout
    assert f"on 2 Lambda workers over {kind} " in done.stdout
