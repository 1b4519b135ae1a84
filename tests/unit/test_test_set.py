"""``data prepare --test``: a separate test file, read with the train set's width, classes and columns.

Each format's test file becomes the manifest's test split, in file order and in the train
set's classes; one the train set could not score is refused by file and line, column or row
before anything is stored. The library's ``prepare_dataset`` on an in-memory store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lambdaml.channels.memory import MemoryChannel
from lambdaml.data import shards
from lambdaml.data.prepare import DatasetSource, prepare_dataset, split_fraction
from lambdaml.errors import ConfigError, DataError
from tests.unit.test_formats_more import official_batch, write_py2_batch

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TRAIN_SVM = "-1 1:0.5 3:1\n1 2:1\n# a comment\n\n1 1:2 3:0.25\n-1 2:3\n1 1:1.5\n-1 3:4\n"
TEST_SVM = "1 1:1\n-1 3:2\n\n1 2:0.5\n"


@pytest.fixture
def store() -> MemoryChannel:
    return MemoryChannel()


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def prepared(store: MemoryChannel, train: str, test: str, **source: Any) -> shards.Manifest:
    return prepare_dataset(store, "d", DatasetSource(inputs=(train,), test=test, **source), shards=2, seed=3)


def held_out(store: MemoryChannel, manifest: shards.Manifest) -> tuple[np.ndarray, np.ndarray]:
    held = shards.load_test(store, manifest)
    assert held is not None
    X, y = held
    return np.asarray(X), y


def refused(store: MemoryChannel, train: str, test: str, match: str, **source: Any) -> None:
    before = store.list("")
    with pytest.raises(DataError, match=match) as caught:
        prepared(store, train, test, **source)
    assert "\n" not in str(caught.value)
    assert store.list("") == before  # nothing written: both files are read and checked before storage


# --- the test split: the test file's rows, in order, in the train set's classes ---------------


def test_libsvm_test_file_is_the_test_split_in_the_train_sets_classes(tmp_path: Path, store: MemoryChannel) -> None:
    manifest = prepared(store, write(tmp_path / "a", TRAIN_SVM), write(tmp_path / "a.t", TEST_SVM))
    assert (manifest.train_rows, manifest.test_rows, manifest.n_features) == (6, 3, 3)
    assert manifest.label_values == [-1.0, 1.0]
    X, y = held_out(store, manifest)
    np.testing.assert_array_equal(X, [[1, 0, 0], [0, 0, 2], [0, 0.5, 0]])
    np.testing.assert_array_equal(y, [1, 0, 1])  # +1 is class 1 and -1 class 0, as in the train set


def test_a_test_file_without_every_class_keeps_the_train_sets_mapping(tmp_path: Path, store: MemoryChannel) -> None:
    train = write(tmp_path / "a", "1 1:1\n2 1:2\n3 1:3\n1 1:4\n")
    manifest = prepared(store, train, write(tmp_path / "a.t", "3 1:1\n3 1:2\n"))
    assert manifest.n_classes == 3 and manifest.label_values == [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(held_out(store, manifest)[1], [2, 2])  # not re-numbered from its own labels


def test_the_whole_train_file_goes_to_shards_as_a_single_file_without_a_test_fraction(
    tmp_path: Path, store: MemoryChannel
) -> None:
    train = write(tmp_path / "a", TRAIN_SVM)
    with_test = prepared(store, train, write(tmp_path / "a.t", TEST_SVM))
    alone = prepare_dataset(store, "e", DatasetSource(inputs=(train,)), shards=2, seed=3, test_fraction=0.0)
    assert with_test.shard_hashes == alone.shard_hashes and with_test.shard_rows == alone.shard_rows
    assert alone.test_rows == 0


def test_sparse_libsvm_test_file_is_csr_of_the_train_width(tmp_path: Path, store: MemoryChannel) -> None:
    manifest = prepared(store, write(tmp_path / "a", TRAIN_SVM), write(tmp_path / "a.t", "1 1:1\n"), sparse=True)
    assert manifest.format == "csr" and manifest.test_rows == 1
    held = shards.load_test(store, manifest)
    assert held is not None and held[0].shape == (1, 3)


def test_n_features_widens_both_files(tmp_path: Path, store: MemoryChannel) -> None:
    train, test = write(tmp_path / "a", TRAIN_SVM), write(tmp_path / "a.t", "1 5:1\n")
    manifest = prepared(store, train, test, n_features=6)
    assert manifest.n_features == 6 and held_out(store, manifest)[0].tolist() == [[0, 0, 0, 0, 1, 0]]


def test_csv_test_file(tmp_path: Path, store: MemoryChannel) -> None:
    train = write(tmp_path / "a.csv", "y,a,b\n-1,1,2\n1,3,4\n1,5,6\n-1,7,8\n")
    manifest = prepared(store, train, write(tmp_path / "t.csv", "y,a,b\n1,0.5,1\n\n-1,2,3\n"))
    assert (manifest.train_rows, manifest.test_rows, manifest.n_features) == (4, 2, 2)
    X, y = held_out(store, manifest)
    np.testing.assert_array_equal(X, [[0.5, 1], [2, 3]])
    np.testing.assert_array_equal(y, [1, 0])


def test_npz_test_file_keeps_the_image_shape(tmp_path: Path, store: MemoryChannel) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "a.npz", X=rng.random((12, 1, 2, 2)), y=np.arange(12) % 3 + 5)
    test_X = rng.random((4, 1, 2, 2))
    np.savez(tmp_path / "t.npz", X=test_X, y=np.array([7, 5, 6, 7]))
    manifest = prepared(store, str(tmp_path / "a.npz"), str(tmp_path / "t.npz"))
    assert manifest.sample_shape == [1, 2, 2] and manifest.test_rows == 4
    X, y = held_out(store, manifest)
    np.testing.assert_array_equal(X, test_X.reshape(4, -1).astype(np.float32))
    np.testing.assert_array_equal(y, [2, 0, 1, 2])


def test_parquet_test_file_is_read_by_column_name(tmp_path: Path, store: MemoryChannel) -> None:
    pq.write_table(pa.table({"label": [0, 1, 1, 0], "a": [1.0, 2, 3, 4], "b": [5, 6, 7, 8]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"b": [9, 10], "label": [1, 0], "a": [0.5, 0.25]}), tmp_path / "t.parquet")  # reordered
    manifest = prepared(store, str(tmp_path / "a.parquet"), str(tmp_path / "t.parquet"))
    X, y = held_out(store, manifest)
    np.testing.assert_array_equal(X, [[0.5, 9], [0.25, 10]])  # in the train set's column order
    np.testing.assert_array_equal(y, [1, 0])


def test_cifar10_test_batch(tmp_path: Path, store: MemoryChannel) -> None:
    batch, _, _ = official_batch(20, seed=1)
    batch[b"labels"] = [i % 10 for i in range(20)]
    write_py2_batch(tmp_path / "data_batch_1", batch)
    test_batch, data, labels = official_batch(3, seed=2)
    write_py2_batch(tmp_path / "test_batch", test_batch)
    manifest = prepared(store, str(tmp_path / "data_batch_1"), str(tmp_path / "test_batch"), format="cifar10")
    X, y = held_out(store, manifest)
    assert manifest.test_rows == 3 and manifest.train_rows == 20
    np.testing.assert_array_equal(X, data.astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(y, labels)


# --- refused, by file and line, column or row, with nothing stored --------------------------


def test_libsvm_feature_beyond_the_train_width(tmp_path: Path, store: MemoryChannel) -> None:
    test = write(tmp_path / "a.t", "1 1:1\n\n# wide\n-1 4:2\n")
    refused(store, write(tmp_path / "a", TRAIN_SVM), test, rf"^{test}:4: feature index 4 is beyond the train set's 3")


@pytest.mark.parametrize("sparse", [False, True])
def test_libsvm_label_the_train_set_lacks(tmp_path: Path, store: MemoryChannel, sparse: bool) -> None:
    test = write(tmp_path / "a.t", "1 1:1\n# two\n\n2 3:2\n")
    words = rf"^{test}:4: label 2 is not one of the train set's labels \(-1, 1\)$"
    refused(store, write(tmp_path / "a", TRAIN_SVM), test, words, sparse=sparse)


def test_csv_label_the_train_set_lacks_names_the_line(tmp_path: Path, store: MemoryChannel) -> None:
    train = write(tmp_path / "a.csv", "0,1,2\n1,3,4\n1,5,6\n")
    test = write(tmp_path / "t.csv", "a,b,c\n1,1,1\n\n3,2,2\n")
    refused(store, train, test, rf"^{test}:4: label 3 is not one of the train set's labels \(0, 1\)$")


@pytest.mark.parametrize(
    ("train", "test", "words"),
    [
        ("y,a,b\n0,1,2\n1,3,4\n", "y,a,c\n0,1,2\n", r"t.csv: column 3 is 'c', the train file's is 'b'$"),
        ("y,a,b\n0,1,2\n1,3,4\n", "y,a\n0,1\n", r"t.csv: no column 3 \('b'\), which the train file has$"),
        ("y,a\n0,1\n1,3\n", "y,a,b\n0,1,2\n", r"t.csv: column 3 \('b'\) is not in the train file$"),
        ("0,1,2\n1,3,4\n", "\n0,1\n", r"t.csv:2: 2 columns, the train file has 3$"),
    ],
)
def test_csv_different_column_set(tmp_path: Path, store: MemoryChannel, train: str, test: str, words: str) -> None:
    refused(store, write(tmp_path / "a.csv", train), write(tmp_path / "t.csv", test), words)


def test_npz_different_row_shape_and_foreign_label(tmp_path: Path, store: MemoryChannel) -> None:
    np.savez(tmp_path / "a.npz", X=np.ones((6, 4)), y=np.arange(6) % 2)
    np.savez(tmp_path / "t.npz", X=np.ones((2, 5)), y=np.zeros(2))
    refused(store, str(tmp_path / "a.npz"), str(tmp_path / "t.npz"), r"t.npz: X's rows have shape \(5,\), the train")
    np.savez(tmp_path / "u.npz", X=np.ones((3, 4)), y=np.array([0, 1, 4]))
    refused(store, str(tmp_path / "a.npz"), str(tmp_path / "u.npz"), r"u.npz: row index 2: label 4 is not one of")


def test_parquet_different_column_set(tmp_path: Path, store: MemoryChannel) -> None:
    train = tmp_path / "a.parquet"
    pq.write_table(pa.table({"label": [0, 1, 1], "a": [1.0, 2, 3], "b": [4, 5, 6], "city": ["x", "y", "z"]}), train)
    lacking = tmp_path / "lacking.parquet"
    pq.write_table(pa.table({"label": [0], "a": [1.0]}), lacking)
    refused(store, str(train), str(lacking), r"lacking.parquet: no column 'b', which the train file has$")
    extra = tmp_path / "extra.parquet"
    pq.write_table(pa.table({"label": [0], "a": [1.0], "b": [2], "c": [3]}), extra)
    refused(store, str(train), str(extra), r"extra.parquet: column 'c' is not in the train file; drop it, or choose")
    # Features named: a test file's other columns are left out, as the train file's are.
    manifest = prepared(store, str(train), str(extra), features=("b",))
    assert manifest.n_features == 1 and held_out(store, manifest)[0].tolist() == [[2]]
    label = tmp_path / "label.parquet"
    pq.write_table(pa.table({"label": [1, 2], "a": [1.0, 1], "b": [2, 2]}), label)
    refused(store, str(train), str(label), r"label.parquet: row index 1: label 2 is not one of the train set's")


def test_regression_labels_take_any_test_value(tmp_path: Path, store: MemoryChannel) -> None:
    train = write(tmp_path / "a", "0.5 1:1\n1.25 1:2\n2.75 1:3\n")
    manifest = prepared(store, train, write(tmp_path / "a.t", "9.5 1:1\n"))
    assert manifest.label_values is None and held_out(store, manifest)[1].tolist() == [9.5]


# --- options -------------------------------------------------------------------------------


def test_a_test_fraction_is_for_a_single_file() -> None:
    assert split_fraction(None, has_test=False) == 0.2
    assert split_fraction(0.3, has_test=False) == 0.3
    assert split_fraction(None, has_test=True) == 0.0
    assert split_fraction(0.0, has_test=True) == 0.0
    with pytest.raises(ConfigError, match="with --test, the test file is the test split"):
        split_fraction(0.2, has_test=True)


def test_shards_prepare_refuses_a_test_set_with_a_test_fraction_and_a_foreign_label(store: MemoryChannel) -> None:
    X, y = np.ones((4, 2), np.float32), np.array([0, 1, 0, 1], np.float32)
    with pytest.raises(DataError, match="hold out one or the other"):
        shards.prepare(store, "d", X, y, shards=1, test_fraction=0.2, test=(X, y))
    with pytest.raises(DataError, match="test row 1 has label 2, which the train set lacks"):
        shards.prepare(store, "d", X, y, shards=1, test_fraction=0.0, test=(X[:2], np.array([1, 2], np.float32)))
    with pytest.raises(DataError, match="the test set's 3 features are not the train set's 2"):
        shards.prepare(store, "d", X, y, shards=1, test_fraction=0.0, test=(np.ones((1, 3), np.float32), y[:1]))
    assert store.list("") == []


@pytest.mark.parametrize(
    ("source", "words"),
    [
        (DatasetSource(synthetic="higgs", test="t"), "--test applies to --input files"),
        (DatasetSource(inputs=("a.csv",), label="y"), "--label applies to Parquet input, not csv"),
        (DatasetSource(inputs=("a.svm",), features=("a",)), "--features applies to Parquet input, not libsvm"),
        (DatasetSource(inputs=("a.parquet",), features=("a", "b", "a")), "--features names column 'a' twice"),
        (DatasetSource(inputs=("a.parquet",), features=("a", "")), "--features takes column names"),
        (DatasetSource(inputs=("s3://bucket",)), "'s3://bucket' is not an S3 object: write s3://BUCKET/KEY"),
        (DatasetSource(inputs=("a",), test="s3://b/dir/"), "is not an S3 object"),
    ],
)
def test_source_mistakes_are_config_errors(source: DatasetSource, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        source.check()
