"""A channel kind from outside lambdaml (``tests/plugins/dict_channel.py``), declared only in the
``lambdaml.plugins`` entry-point group of a package this test puts on the import path: it passes
the whole channel contract, trains the memory channel's model bit for bit, and the cost model
advises on it with the figures of a profile. Nothing under lambdaml/ knows it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analytic_model import Workload, load_profile, predict_faas
from analytic_model.profile import PROFILE_VERSION
from analytic_model.tables import aws_defaults, plain
from lambdaml import catalogue, codec, keys
from lambdaml.channels import Channel, open_channel
from lambdaml.config import ChannelSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from tests.contract.test_channel_contract import *  # noqa: F403  (every contract test, over the plug-in's channel)

ROOT = Path(__file__).resolve().parents[2]
KIND = "dictstore"
ENTRY_POINTS = "[lambdaml.plugins]\ndictstore = tests.plugins.dict_channel:DESCRIPTION\n"


@pytest.fixture(scope="module", autouse=True)
def plugin_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An installed package declaring the plug-in, as pip would leave it: a dist-info with its entry
    points, on this process's import path and on its children's."""
    site = tmp_path_factory.mktemp("site")
    info = site / "lambdaml_dictstore-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lambdaml-dictstore\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    patch = pytest.MonkeyPatch()
    patch.syspath_prepend(str(site))
    patch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    yield site
    patch.undo()


@pytest.fixture
def channel(prefix: str) -> Iterator[Channel]:
    """The contract's channel: the plug-in's, opened from its spec as any job opens a channel."""
    chan = open_channel(ChannelSpec(kind=KIND))
    chan.ensure()
    try:
        yield chan
    finally:
        with contextlib.suppress(Exception):
            chan.clear(prefix)
        chan.close()


def test_the_kind_is_known_only_through_its_entry_point() -> None:
    info = catalogue.channel(KIND)
    assert info.path == "tests.plugins.dict_channel:DictStoreChannel" and not info.connects_processes
    assert KIND not in catalogue.shared_channels()
    spec = parse_job({"dataset": "d", "channel": {"kind": KIND, "space": "s"}}).channel
    assert type(spec).__name__ == "DictStoreSpec" and spec.model_dump()["space"] == "s"
    assert not spec.authenticates_values  # its description: no other party reaches it
    message = "channel.space: String should have at least 1 character"
    with pytest.raises(Exception, match=message):
        parse_job({"dataset": "d", "channel": {"kind": KIND, "space": ""}})


def _job(storage: StorageSpec, channel: dict[str, Any], dataset: str) -> Any:
    return parse_job(
        {
            "name": "plugin",
            "workers": 3,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": channel,
            "model": {"name": "lr", "l2": 1e-3},
            "algorithm": {"name": "ga_sgd", "seed": 5, "epochs": 2, "batch_size": 30, "lr": 0.5},
            "sync": {"timeout_s": 60},
        }
    )


def test_bsp_ga_sgd_on_the_plugin_trains_the_memory_channels_model(
    data_store: tuple[StorageSpec, Channel], tmp_path: Path
) -> None:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(900, seed=4)
    shards.prepare(store, "plugin-equal", X, y, shards=3, test_fraction=0.2, seed=1)
    models = {}
    for channel in ({"kind": "memory"}, {"kind": KIND, "space": "training"}):
        result = run_job(_job(spec, channel, "plugin-equal"), results_dir=tmp_path)
        assert result.ranks_agree and result.pattern == "allreduce"
        models[channel["kind"]] = codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]
        assert result.cost["channel"]["dollars"] == 0.0  # billed by nothing, as the in-memory channel
    assert np.array_equal(models["memory"], models[KIND])


def _profile(path: Path) -> Path:
    """A calibrated profile with figures for the plug-in's channel: Redis's, 4x faster."""
    figures = plain(aws_defaults())["channels"]["redis"]
    faster = {k: v / 4 if k.startswith(("latency_", "extra_", "server_")) and v else v for k, v in figures.items()}
    path.write_text(json.dumps({"version": PROFILE_VERSION, "channels": {KIND: faster}}))
    return path


def test_advise_takes_the_plugin_with_the_profiles_figures(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "dictstore.json")
    argv = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "1.2GB", "--samples", "11e6"]
    argv += ["--workers", "2,10", "--memory", "3008", "--instances", "c5.large", "--channels", f"{KIND},s3"]
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", *argv, "--profile", str(profile), "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [r for r in json.loads(done.stdout)["rows"] if r["option"] == KIND]
    assert {r["workers"] for r in rows} == {2, 10}
    workload = Workload("lr", dataset_bytes=1.2e9, samples=11_000_000, features=28)
    for row in rows:
        predicted = predict_faas(workload, row["workers"], KIND, row["pattern"], 3008, load_profile(profile))
        assert row["time"]["communicate_s"] == pytest.approx(predicted.time["communicate_s"])
        assert row["costs"]["channel"] == 0.0
    s3 = {(r["workers"], r["pattern"]): r for r in json.loads(done.stdout)["rows"] if r["option"] == "s3"}
    assert all(r["time"]["communicate_s"] < s3[r["workers"], r["pattern"]]["time"]["communicate_s"] for r in rows)
