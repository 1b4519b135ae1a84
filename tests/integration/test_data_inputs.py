"""``lambdaml data prepare`` on moto's S3: a test file, Parquet, and inputs read from S3.

- A test file the train set cannot score is refused by the command in one line naming the
  file and its line or column, exit 1, with the bucket as it was.
- The same table as Parquet (several row groups) and as CSV gives bit-identical shards, and
  a job trained on each gives the same model bytes.
- An ``s3://`` input gives the shards of the same local file; a missing one is one line, and
  nothing is written, not even the dataset's bucket.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lambdaml import cli, keys
from lambdaml.channels import Channel
from lambdaml.channels.memory import MemoryChannel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards
from lambdaml.data.prepare import DatasetSource, prepare_dataset
from lambdaml.driver import run_job
from lambdaml.errors import ChannelError, ConfigError
from lambdaml.storage import open_storage
from tests.helpers import Services, unique_name

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytestmark = pytest.mark.timeout(300)

TRAIN_SVM = "".join(f"{1 if i % 3 else -1} 1:{i / 7:.4f} 2:{(i * 5) % 11 / 3:.4f} 4:{i % 2}\n" for i in range(40))


def prepare(spec: StorageSpec, name: str, *args: str) -> list[str]:
    return ["data", "prepare", name, *args, "--bucket", spec.bucket, "--endpoint-url", str(spec.endpoint_url)]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a warning would be one more line on a terminal
        code = cli.main(argv)
    return code, capsys.readouterr().err


def refused_by_the_cli(argv: list[str], store: Channel, capsys: pytest.CaptureFixture[str], line: str) -> None:
    before = sorted(store.list(""))
    code, err = run_cli(argv, capsys)
    assert code == cli.EXIT_ERROR
    assert err.splitlines() == [f"error: {line}"], err
    assert sorted(store.list("")) == before  # nothing half-written


# --- a test file the train set cannot score ---------------------------------------------


def test_the_cli_refuses_a_test_file_the_train_set_cannot_score(
    data_store: tuple[StorageSpec, Channel], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = data_store
    train = tmp_path / "a9a"
    train.write_text(TRAIN_SVM)
    wide = tmp_path / "wide.t"
    wide.write_text("1 1:1\n# wider\n-1 9:2\n")
    args = prepare(spec, "t-wide", "--input", str(train), "--test", str(wide), "--shards", "2")
    refused_by_the_cli(args, store, capsys, f"{wide}:3: feature index 9 is beyond the train set's 4 features")

    foreign = tmp_path / "foreign.t"
    foreign.write_text("1 1:1\n\n0 2:2\n")
    args = prepare(spec, "t-label", "--input", str(train), "--test", str(foreign), "--shards", "2")
    refused_by_the_cli(args, store, capsys, f"{foreign}:3: label 0 is not one of the train set's labels (-1, 1)")

    csv_train, csv_test = tmp_path / "a.csv", tmp_path / "t.csv"
    csv_train.write_text("y,a,b\n0,1,2\n1,3,4\n")
    csv_test.write_text("y,a,c\n0,1,2\n")
    args = prepare(spec, "t-csv", "--input", str(csv_train), "--test", str(csv_test), "--shards", "1")
    refused_by_the_cli(args, store, capsys, f"{csv_test}: column 3 is 'c', the train file's is 'b'")

    pq_train, pq_test = tmp_path / "a.parquet", tmp_path / "t.parquet"
    pq.write_table(pa.table({"label": [0, 1], "a": [1.0, 2.0], "b": [3, 4]}), pq_train)
    pq.write_table(pa.table({"label": [0], "a": [1.0]}), pq_test)
    args = prepare(spec, "t-pq", "--input", str(pq_train), "--test", str(pq_test), "--shards", "1")
    refused_by_the_cli(args, store, capsys, f"{pq_test}: no column 'b', which the train file has")

    cut = tmp_path / "cut.parquet"
    cut.write_bytes(pq_train.read_bytes()[:-20])
    args = prepare(spec, "t-cut", "--input", str(cut), "--shards", "1")
    refused_by_the_cli(
        args,
        store,
        capsys,
        f"cannot read {str(cut)!r} as Parquet: Parquet magic bytes not found in footer. Either the file is corrupted "
        "or this is not a parquet file.",
    )

    args = prepare(
        spec, "t-frac", "--input", str(train), "--test", str(wide), "--test-fraction", "0.1", "--shards", "2"
    )
    refused_by_the_cli(
        args,
        store,
        capsys,
        "--test-fraction holds out part of a single --input file; with --test, the test file is the test split",
    )


def test_the_cli_prepares_a_train_and_a_test_file(
    data_store: tuple[StorageSpec, Channel], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = data_store
    train, test = tmp_path / "a9a", tmp_path / "a9a.t"
    train.write_text(TRAIN_SVM)
    test.write_text("1 1:1\n-1 4:2\n1 2:0.5\n")
    code, err = run_cli(prepare(spec, "a9a", "--input", str(train), "--test", str(test), "--shards", "4"), capsys)
    assert code == 0, err
    manifest = shards.read_manifest(store, "a9a")
    assert (manifest.train_rows, manifest.test_rows, manifest.label_values) == (40, 3, [-1.0, 1.0])
    held = shards.load_test(store, manifest)
    assert held is not None
    np.testing.assert_array_equal(held[1], [1, 0, 1])


# --- Parquet and CSV: the same shards, the same model --------------------------------------


def table(rows: int = 1500, seed: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, 6))
    y = (X @ rng.standard_normal(6) + 0.3 * rng.standard_normal(rows) > 0).astype(np.int64)
    return {"label": y, **{f"x{i}": X[:, i] for i in range(6)}}


def write_csv(path: Path, columns: dict[str, np.ndarray]) -> None:
    names = list(columns)
    lines = [",".join(names)]
    lines += [",".join(repr(columns[n][i].item()) for n in names) for i in range(len(columns["label"]))]
    path.write_text("\n".join(lines) + "\n")


def job_on(spec: StorageSpec, dataset: str) -> Any:
    return parse_job(
        {
            "name": "pq",
            "workers": 2,
            "dataset": dataset,
            "storage": spec.model_dump(),
            "channel": {"kind": "memory"},
            "model": {"name": "lr", "l2": 1e-4},
            "algorithm": {"name": "ga_sgd", "epochs": 2, "batch_size": 50, "lr": 0.5, "seed": 7},
            "sync": {"timeout_s": 60},
        }
    )


def test_parquet_gives_the_shards_and_the_model_of_the_same_table_as_csv(
    data_store: tuple[StorageSpec, Channel], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = data_store
    columns = table()
    parquet, csv = tmp_path / "t.parquet", tmp_path / "t.csv"
    pq.write_table(pa.table(columns), parquet, row_group_size=200)
    assert pq.ParquetFile(parquet).num_row_groups == 8
    write_csv(csv, columns)
    manifests = {}
    for name, path in (("from-parquet", parquet), ("from-csv", csv)):
        code, err = run_cli(prepare(spec, name, "--input", str(path), "--shards", "2", "--seed", "5"), capsys)
        assert code == 0, err
        manifests[name] = shards.read_manifest(store, name)
    a, b = manifests["from-parquet"], manifests["from-csv"]
    assert a.shard_hashes == b.shard_hashes and a.shard_bytes == b.shard_bytes
    assert (a.test_hash, a.test_rows, a.n_features) == (b.test_hash, b.test_rows, 6)
    for i in range(2):
        assert store.get(keys.dataset_shard(a.name, a.dataset_version, i)) == store.get(
            keys.dataset_shard(b.name, b.dataset_version, i)
        )
    models = [store.get(keys.job_model(run_job(job_on(spec, name), results_dir=None).job_id)) for name in manifests]
    assert models[0] == models[1]


# --- inputs on S3 ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(services: Services) -> Channel:
    """Another bucket, where the input files are: the dataset bucket's endpoint and credentials reach it."""
    bucket = open_storage(StorageSpec(bucket=unique_name("inputs"), endpoint_url=services.moto_url))
    bucket.ensure()
    return bucket


@pytest.mark.parametrize("fmt", ["libsvm", "parquet"])
def test_an_s3_input_gives_the_shards_of_the_local_file(
    fmt: str,
    data_store: tuple[StorageSpec, Channel],
    inputs: Channel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, store = data_store
    train, test = tmp_path / f"train.{fmt}", tmp_path / f"test.{fmt}"
    if fmt == "libsvm":
        train.write_text(TRAIN_SVM)
        test.write_text("1 1:1\n-1 4:2\n")
    else:
        pq.write_table(pa.table(table(600, seed=1)), train, row_group_size=100)
        pq.write_table(pa.table(table(50, seed=2)), test)
    for path in (train, test):
        inputs.put(f"in/{path.name}", path.read_bytes())
    uri = f"s3://{inputs.describe().removeprefix('s3://')}/in"
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(downloads))  # where the downloads go, to see them gone
    local = prepare(spec, f"local-{fmt}", "--input", str(train), "--test", str(test), "--shards", "2")
    remote = prepare(
        spec, f"s3-{fmt}", "--input", f"{uri}/{train.name}", "--test", f"{uri}/{test.name}", "--shards", "2"
    )
    for argv in (local, remote):
        code, err = run_cli([*argv, "--format", fmt], capsys)
        assert code == 0, err
    a, b = shards.read_manifest(store, f"local-{fmt}"), shards.read_manifest(store, f"s3-{fmt}")
    assert a.shard_hashes == b.shard_hashes and (a.test_hash, a.test_rows) == (b.test_hash, b.test_rows)
    assert list(downloads.iterdir()) == []


def test_a_missing_s3_input_is_one_line_and_writes_nothing(
    services: Services, inputs: Channel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = StorageSpec(bucket=unique_name("never"), endpoint_url=services.moto_url)
    bucket = inputs.describe().removeprefix("s3://")
    code, err = run_cli(prepare(spec, "gone", "--input", f"s3://{bucket}/absent.svm", "--shards", "1"), capsys)
    assert code == cli.EXIT_ERROR
    assert err.splitlines() == [f"error: cannot read s3://{bucket}/absent.svm: no such key in bucket {bucket!r}"]
    code, err = run_cli(prepare(spec, "gone", "--input", "s3://no-such-bucket-x1/a.svm", "--shards", "1"), capsys)
    assert code == cli.EXIT_ERROR
    assert err.splitlines()[0].startswith(
        "error: cannot read s3://no-such-bucket-x1/a.svm: no bucket 'no-such-bucket-x1'"
    )
    assert len(err.splitlines()) == 1
    with pytest.raises(ChannelError, match="does not exist"):  # not even the dataset's bucket was created
        open_storage(spec).ping()


def test_an_s3_inputs_mistake_names_its_uri(
    data_store: tuple[StorageSpec, Channel], inputs: Channel, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, store = data_store
    inputs.put("bad/train.svm", b"1 1:1\n-1 2:x\n")
    uri = f"s3://{inputs.describe().removeprefix('s3://')}/bad/train.svm"
    refused_by_the_cli(
        prepare(spec, "bad", "--input", uri, "--shards", "1"),
        store,
        capsys,
        f"{uri}:2: feature '2:x' is not index:value (an index is 1 to 10 digits, a value a decimal number such as "
        "-1.5e-3)",
    )


def test_the_library_reads_s3_inputs_through_an_opened_s3_store_only(
    data_store: tuple[StorageSpec, Channel], inputs: Channel
) -> None:
    _, store = data_store
    inputs.put("lib/train.svm", TRAIN_SVM.encode())
    uri = f"s3://{inputs.describe().removeprefix('s3://')}/lib/train.svm"
    manifest = prepare_dataset(store, "lib", DatasetSource(inputs=(uri,)), shards=2, seed=1)
    assert manifest.train_rows + manifest.test_rows == 40 and manifest.test_rows == 8
    memory = MemoryChannel()
    with pytest.raises(ConfigError, match="an s3:// input is read through S3 storage, not a memory channel"):
        prepare_dataset(memory, "lib", DatasetSource(inputs=(uri,)), shards=2)
    assert memory.list("") == []
