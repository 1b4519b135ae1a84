"""Datasets are immutable versions: a re-prepare that dies half-way leaves the old one whole and current,
a job trains on the version it started on, and a mixed dataset is refused by name. On moto's S3."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lambdaml import cli, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.errors import DataError
from tests.helpers import unique_name

SHARDS = 8


def rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    X, y, _ = synthetic.higgs_like(1600, seed=seed)
    return X, y


def job_on(storage: StorageSpec, dataset: str) -> Any:
    return parse_job(
        {
            "workers": 4,
            "dataset": dataset,
            "storage": storage.model_dump(),
            "channel": {"kind": "memory"},
            "algorithm": {"epochs": 2, "batch_size": 50, "lr": 0.5},
        }
    )


def test_an_interrupted_re_prepare_leaves_the_previous_version_current_and_whole(
    data_store: tuple[StorageSpec, Channel], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, store = data_store
    name = unique_name("reprep")
    first = shards.prepare(store, name, *rows(1), shards=SHARDS, seed=1)
    before = {i: shards.load_worker_data(store, first, i, SHARDS)[1].copy() for i in range(SHARDS)}

    written = 0
    put = type(store).put

    def dying_put(self: Channel, key: str, data: bytes) -> list[str]:
        nonlocal written
        if "/shards/" in key:
            written += 1
            if written == 4:  # killed while writing the 4th of 8 new shards
                raise KeyboardInterrupt
        return put(self, key, data)

    monkeypatch.setattr(type(store), "put", dying_put)
    with pytest.raises(KeyboardInterrupt):
        shards.prepare(store, name, *rows(2), shards=SHARDS, seed=2, overwrite=True)
    monkeypatch.undo()

    current = shards.read_manifest(store, name)
    assert current == first, "the interrupted prepare moved the dataset to a version it never finished"
    for i in range(SHARDS):  # every shard of the current version is the one its manifest describes
        np.testing.assert_array_equal(shards.load_worker_data(store, current, i, SHARDS)[1], before[i])
    result = run_job(job_on(spec, name), results_dir=None)
    assert result.dataset.version == first.dataset_version
    assert result.test_accuracy > 0.6

    # The next prepare that completes replaces it, and removes the abandoned half.
    second = shards.prepare(store, name, *rows(3), shards=SHARDS, seed=3, overwrite=True)
    assert shards.read_manifest(store, name) == second != first
    versions = {k.split("/v/")[1].split("/")[0] for k in store.list(keys.dataset_prefix(name) + "v/")}
    assert versions == {first.dataset_version, second.dataset_version}


def test_a_dataset_is_not_replaced_without_overwrite(data_store: tuple[StorageSpec, Channel]) -> None:
    _, store = data_store
    name = unique_name("keep")
    first = shards.prepare(store, name, *rows(1), shards=2)
    with pytest.raises(DataError, match=f"dataset {name!r} already exists.*--overwrite"):
        shards.prepare(store, name, *rows(2), shards=2)
    assert shards.read_manifest(store, name) == first


def test_the_cli_refuses_an_existing_dataset_in_one_line(
    data_store: tuple[StorageSpec, Channel], capsys: pytest.CaptureFixture[str]
) -> None:
    spec, _ = data_store
    name = unique_name("cli")
    argv = ["data", "prepare", name, "--synthetic", "higgs", "--rows", "200", "--shards", "2"]
    argv += ["--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--overwrite" in err, err
    assert cli.main([*argv, "--overwrite"]) == 0


def test_a_job_keeps_the_version_it_started_on(data_store: tuple[StorageSpec, Channel]) -> None:
    _, store = data_store
    name = unique_name("pin")
    first = shards.prepare(store, name, *rows(1), shards=2)
    second = shards.prepare(store, name, *rows(2), shards=2, overwrite=True)
    # A worker of a job pinned to the first version (a Lambda continuation, say) still reads it whole.
    pinned = shards.read_manifest(store, name, first.dataset_version)
    assert pinned == first and shards.read_manifest(store, name) == second
    shards.load_worker_data(store, pinned, 0, 2)
    shards.prepare(store, name, *rows(3), shards=2, overwrite=True)  # two versions on, it is gone: said so
    with pytest.raises(DataError, match=f"version {first.dataset_version} is gone"):
        shards.read_manifest(store, name, first.dataset_version)


def test_labels_are_stored_as_classes_in_order(data_store: tuple[StorageSpec, Channel]) -> None:
    """{1, 2} labels would otherwise all read as the positive class of a binary model."""
    _, store = data_store
    X, y = rows(1)
    manifest = shards.prepare(store, unique_name("labels"), X, np.where(y > 0, 2.0, 1.0), shards=2, test_fraction=0)
    assert manifest.n_classes == 2 and manifest.label_values == [1.0, 2.0]
    _, stored = shards.load_worker_data(store, manifest, 0, 1)
    assert set(np.unique(stored).tolist()) == {0.0, 1.0}
    digits = shards.prepare(store, unique_name("ten"), X[:100], np.arange(100) % 10 + 1.0, shards=1, test_fraction=0)
    assert digits.n_classes == 10 and digits.label_values == [float(v) for v in range(1, 11)]


def test_of_two_prepares_of_a_new_name_at_once_the_second_to_finish_is_refused(
    data_store: tuple[StorageSpec, Channel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both found the name free; the one whose version would silently not be current says so instead."""
    _, store = data_store
    name = unique_name("race")
    check_absent = shards.check_absent
    first: list[shards.Manifest] = []

    def the_other_finishes_first(store_: Channel, name_: str, *, overwrite: bool) -> None:
        check_absent(store_, name_, overwrite=overwrite)
        monkeypatch.setattr(shards, "check_absent", check_absent)
        first.append(shards.prepare(store_, name_, *rows(1), shards=2))

    monkeypatch.setattr(shards, "check_absent", the_other_finishes_first)
    with pytest.raises(DataError, match="created by another prepare meanwhile"):
        shards.prepare(store, name, *rows(2), shards=2)
    assert shards.read_manifest(store, name) == first[0]
    versions = {k.split("/v/")[1].split("/")[0] for k in store.list(keys.dataset_prefix(name) + "v/")}
    assert versions == {first[0].dataset_version}, "the refused prepare left its version behind"
