"""``lambdaml data list`` and ``data rm`` on a bucket on moto: versions, rows, shards and size, and
a removal that takes every version and the pointer of one dataset and nothing of another."""

from __future__ import annotations

import json

import pytest

from lambdaml import cli, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic


def data(spec: StorageSpec, *args: str) -> list[str]:
    return ["data", *args, "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url)]


def test_list_and_rm(data_store: tuple[StorageSpec, Channel], capsys: pytest.CaptureFixture[str]) -> None:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(500, seed=1)
    shards.prepare(store, "higgs", X, y, shards=4)
    newest = shards.prepare(store, "higgs", X[:300], y[:300], shards=2, overwrite=True)
    shards.prepare(store, "higgs-small", X[:100], y[:100], shards=1)

    assert cli.main(data(spec, "list", "--output", "json")) == 0
    listed = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"higgs", "higgs-small"}
    higgs = listed["higgs"]
    assert (higgs["versions"], higgs["version"], higgs["shards"]) == (2, newest.dataset_version, 2)
    assert (higgs["train_rows"], higgs["test_rows"]) == (newest.train_rows, newest.test_rows)
    assert higgs["bytes"] == sum(newest.shard_bytes) + newest.test_bytes > 0
    assert cli.main(data(spec, "list")) == 0
    table = capsys.readouterr().out
    assert any(line.split()[:2] == ["higgs", "2"] for line in table.splitlines() if line.strip())

    assert cli.main(data(spec, "rm", "higgs")) == 0
    assert "dataset higgs removed" in capsys.readouterr().out
    assert store.list(keys.dataset_prefix("higgs")) == []
    assert shards.current_version(store, "higgs-small") is not None  # a name that only shares a prefix stays

    assert cli.main(data(spec, "rm", "higgs")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no dataset 'higgs'" in err[0] and "higgs-small" in err[0]
