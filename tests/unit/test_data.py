"""Dataset loaders, the synthetic Higgs generator, batch order and binary shards."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lambdaml import codec, keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.data import batches, shards
from lambdaml.data.formats import load_csv, load_libsvm
from lambdaml.data.synthetic import HIGGS_FEATURES, higgs_like
from lambdaml.errors import DataError
from tests.helpers import vouched_shard


def write(tmp_path: Path, text: str, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- LIBSVM -----------------------------------------------------------------------


def test_libsvm_parses_one_based_indices_comments_and_blank_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# header comment\n"
        "+1 1:0.5 3:-2\n"
        "\n"
        "-1 2:1.5   # trailing comment\n"
        "   \n"
        "0\n"  # a row with no features
        "1 4:1e-3 1:7\n",
    )
    X, y = load_libsvm(path)
    assert X.dtype == np.float32 and y.dtype == np.float32
    np.testing.assert_array_equal(y, [1, -1, 0, 1])
    expected = np.array(
        [
            [0.5, 0, -2, 0],
            [0, 1.5, 0, 0],
            [0, 0, 0, 0],
            [7, 0, 0, 1e-3],
        ],
        dtype=np.float32,
    )
    np.testing.assert_array_equal(X, expected)


def test_libsvm_n_features_widens_and_is_checked(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1 2:2\n0 2:3\n")
    X, _ = load_libsvm(path, n_features=5)
    assert X.shape == (2, 5)
    np.testing.assert_array_equal(X[:, 2:], 0)
    np.testing.assert_array_equal(X[:, :2], [[1, 2], [0, 3]])
    with pytest.raises(DataError, match="feature index 2 exceeds n_features=1"):
        load_libsvm(path, n_features=1)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("abc 1:2", ["label 'abc' is not a number"]),
        ("1 3 2:1", ["feature '3' is not index:value"]),
        ("1 1:x", ["feature '1:x' is not index:value"]),
        ("1 a:1", ["feature 'a:1' is not index:value"]),
        ("1 0:1.0", ["index 0 is below 1"]),
        ("1 -2:1.0", ["index -2 is below 1"]),
        ("1 2:nan", ["non-finite", "'nan'"]),
        ("1 2:inf", ["non-finite"]),
    ],
)
def test_libsvm_malformed_line_names_file_and_line(tmp_path: Path, line: str, words: list[str]) -> None:
    path = write(tmp_path, f"# comment\n1 1:1\n\n{line}\n0 1:2\n")
    with pytest.raises(DataError) as info:
        load_libsvm(path)
    message = str(info.value)
    assert f"{path}:4:" in message, message
    for word in words:
        assert word in message, message


def test_libsvm_nan_label_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(DataError):
        load_libsvm(write(tmp_path, "1 1:1\nnan 1:2\n"))


def test_libsvm_without_rows(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no data rows"):
        load_libsvm(write(tmp_path, "# only a comment\n\n"))


def test_libsvm_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.svm"
    with pytest.raises(DataError, match="not found") as info:
        load_libsvm(path)
    assert str(path) in str(info.value)


# --- CSV --------------------------------------------------------------------------


@pytest.mark.parametrize("header", [True, False])
def test_csv_label_first(tmp_path: Path, header: bool) -> None:
    text = ("label,f1,f2\n" if header else "") + "1,0.5,2\n0,-1,3.25\n\n1,1e2,0\n"
    X, y = load_csv(write(tmp_path, text, "d.csv"))
    np.testing.assert_array_equal(y, [1, 0, 1])
    np.testing.assert_array_equal(X, [[0.5, 2], [-1, 3.25], [100, 0]])
    assert X.dtype == np.float32 and y.dtype == np.float32


@pytest.mark.parametrize("header", [True, False])
def test_csv_label_last(tmp_path: Path, header: bool) -> None:
    text = ("f1,f2,label\n" if header else "") + "0.5,2,1\n-1,3.25,0\n"
    X, y = load_csv(write(tmp_path, text, "d.csv"), label_column="last")
    np.testing.assert_array_equal(y, [1, 0])
    np.testing.assert_array_equal(X, [[0.5, 2], [-1, 3.25]])


def test_csv_ragged_row(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="3 columns, expected 2") as info:
        load_csv(write(tmp_path, "1,2\n3,4\n5,6,7\n", "d.csv"))
    assert "d.csv" in str(info.value)


def test_csv_non_numeric_value(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a number") as info:
        load_csv(write(tmp_path, "a,b\n1,2\n3,x\n", "d.csv"))
    assert "d.csv" in str(info.value)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_csv_non_finite_value(tmp_path: Path, bad: str) -> None:
    with pytest.raises(DataError, match="NaN or infinite"):
        load_csv(write(tmp_path, f"1,2\n3,{bad}\n", "d.csv"))


def test_csv_header_only_and_single_column(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no data rows"):
        load_csv(write(tmp_path, "a,b\n", "d.csv"))
    with pytest.raises(DataError, match="at least one feature"):
        load_csv(write(tmp_path, "1\n0\n", "e.csv"))


def test_csv_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_csv(tmp_path / "absent.csv")


def test_csv_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes(b"1,2\n\xff,3\n")
    with pytest.raises(DataError, match=r"d\.csv:2: byte 0xff is not UTF-8 text: save the file as UTF-8"):
        load_csv(path)


# --- synthetic Higgs --------------------------------------------------------------


def test_higgs_like_shapes_and_labels() -> None:
    X, y, w_true = higgs_like(500, seed=3)
    assert X.shape == (500, HIGGS_FEATURES) == (500, 28)
    assert y.shape == (500,)
    assert w_true.shape == (29,)
    assert X.dtype == np.float32 and y.dtype == np.float32
    assert set(np.unique(y).tolist()) == {0.0, 1.0}
    assert np.all(np.isfinite(X))


def test_higgs_like_is_reproducible_by_seed() -> None:
    a = higgs_like(200, seed=11)
    b = higgs_like(200, seed=11)
    c = higgs_like(200, seed=12)
    for left, right in zip(a, b, strict=True):
        np.testing.assert_array_equal(left, right)
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[2], c[2])


def test_higgs_ground_truth_classifies_its_own_data() -> None:
    X, y, w_true = higgs_like(20_000, seed=0)
    predicted = (X.astype(np.float64) @ w_true[:-1] + w_true[-1] > 0).astype(np.float32)
    accuracy = float(np.mean(predicted == y))
    assert accuracy > 0.8, accuracy
    assert accuracy < 1.0  # there is label noise
    assert 0.1 < float(y.mean()) < 0.9  # both classes are common


def test_higgs_noise_sets_the_best_accuracy() -> None:
    def best(noise: float) -> float:
        X, y, w = higgs_like(10_000, seed=1, noise=noise)
        return float(np.mean((X @ w[:-1] + w[-1] > 0) == (y > 0)))

    assert best(0.0) > 0.999  # only float32 rounding of X can flip a point on the boundary
    assert best(0.1) > best(5.0)


def test_higgs_skewed_features_are_non_negative() -> None:
    X, _, _ = higgs_like(1000, seed=2)
    assert np.all(X[:, : HIGGS_FEATURES // 3] >= 0)
    assert np.any(X[:, HIGGS_FEATURES // 3 :] < 0)


# --- batch order ------------------------------------------------------------------


def test_epoch_order_is_a_reproducible_permutation() -> None:
    order = batches.epoch_order(100, epoch=2, rank=1, seed=5, shuffle=True)
    np.testing.assert_array_equal(np.sort(order), np.arange(100))
    np.testing.assert_array_equal(order, batches.epoch_order(100, epoch=2, rank=1, seed=5, shuffle=True))
    assert not np.array_equal(order, np.arange(100))


def test_epoch_order_differs_by_epoch_rank_and_seed() -> None:
    base = batches.epoch_order(100, epoch=0, rank=0, seed=0, shuffle=True)
    for kwargs in (
        {"epoch": 1, "rank": 0, "seed": 0},
        {"epoch": 0, "rank": 1, "seed": 0},
        {"epoch": 0, "rank": 0, "seed": 1},
    ):
        other = batches.epoch_order(100, shuffle=True, **kwargs)
        assert not np.array_equal(base, other), kwargs
    # (epoch, rank) = (1, 0) and (0, 1) must not collide either
    a = batches.epoch_order(100, epoch=1, rank=0, seed=0, shuffle=True)
    b = batches.epoch_order(100, epoch=0, rank=1, seed=0, shuffle=True)
    assert not np.array_equal(a, b)


def test_epoch_order_without_shuffle_is_identity() -> None:
    for epoch, rank in ((0, 0), (3, 2)):
        np.testing.assert_array_equal(
            batches.epoch_order(17, epoch=epoch, rank=rank, seed=9, shuffle=False), np.arange(17)
        )
    assert len(batches.epoch_order(0, epoch=0, rank=0, seed=0, shuffle=True)) == 0


@pytest.mark.parametrize(
    ("rows", "batch", "steps"), [(100, 10, 10), (101, 10, 11), (99, 10, 10), (5, 10, 1), (0, 10, 1), (1, 1, 1)]
)
def test_steps_per_epoch(rows: int, batch: int, steps: int) -> None:
    assert batches.steps_per_epoch(rows, batch) == steps


def test_batch_indices_cover_every_row_once() -> None:
    order = batches.epoch_order(53, epoch=0, rank=0, seed=1, shuffle=True)
    steps = batches.steps_per_epoch(53, 10)
    got = list(batches.batch_indices(order, 10, steps))
    assert len(got) == 6
    assert [len(b) for b in got] == [10, 10, 10, 10, 10, 3]
    np.testing.assert_array_equal(np.concatenate(got), order)


def test_batch_indices_yield_empty_batches_for_a_shorter_shard() -> None:
    order = np.arange(15)
    steps = batches.steps_per_epoch(max_shard_rows=40, batch_size=10)  # the largest shard sets the steps
    got = list(batches.batch_indices(order, 10, steps))
    assert [len(b) for b in got] == [10, 5, 0, 0]
    np.testing.assert_array_equal(np.concatenate(got), order)


# --- shards -----------------------------------------------------------------------


@pytest.fixture
def store() -> MemoryChannel:
    return MemoryChannel()


def make_rows(n: int = 103, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # unique rows so that a multiset comparison is exact
    X = np.column_stack([np.arange(n, dtype=np.float32), rng.normal(size=(n, d - 1)).astype(np.float32)])
    y = rng.integers(0, 2, size=n).astype(np.float32)
    return X, y


def as_multiset(X: np.ndarray, y: np.ndarray) -> Counter[tuple[float, ...]]:
    return Counter((*row, label) for row, label in zip(X.tolist(), y.tolist(), strict=True))


@pytest.mark.parametrize(("n_shards", "workers"), [(4, 4), (6, 3), (6, 1), (1, 1)])
def test_prepare_then_load_round_trips_every_row(store: MemoryChannel, n_shards: int, workers: int) -> None:
    X, y = make_rows()
    manifest = shards.prepare(store, "toy_data.v1", X, y, shards=n_shards, test_fraction=0.2, seed=4)
    assert manifest == shards.read_manifest(store, "toy_data.v1")
    assert manifest.shards == n_shards
    assert manifest.n_features == 4
    assert manifest.test_rows == 21
    assert manifest.train_rows == 103 - 21
    assert max(manifest.shard_rows) - min(manifest.shard_rows) <= 1

    seen: Counter[tuple[float, ...]] = Counter()
    for rank in range(workers):
        Xw, yw = shards.load_worker_data(store, manifest, rank, workers)
        assert Xw.dtype == np.float32 and Xw.shape == (manifest.rows_of_worker(rank, workers), 4)
        assert yw.shape == (len(Xw),)
        seen += as_multiset(Xw, yw)
    test = shards.load_test(store, manifest)
    assert test is not None
    assert test[0].shape == (21, 4)
    seen += as_multiset(*test)
    assert seen == as_multiset(X, y)


def test_prepare_shuffles_rows_into_shards(store: MemoryChannel) -> None:
    X, y = make_rows(n=100)
    manifest = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0, seed=0)
    first, _ = shards.load_worker_data(store, manifest, 0, 2)
    assert not np.array_equal(first[:, 0], np.arange(50, dtype=np.float32))


def test_prepare_without_test_split(store: MemoryChannel) -> None:
    X, y = make_rows(n=10)
    manifest = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0)
    assert manifest.test_rows == 0
    assert shards.load_test(store, manifest) is None
    assert keys.dataset_test("toy", manifest.dataset_version) not in store.list(keys.dataset_prefix("toy"))


def test_prepare_rejects_bad_input(store: MemoryChannel) -> None:
    X, y = make_rows(n=10)
    with pytest.raises(DataError, match="do not match"):
        shards.prepare(store, "toy", X, y[:-1], shards=2)
    with pytest.raises(DataError, match="test fraction"):
        shards.prepare(store, "toy", X, y, shards=2, test_fraction=1.0)
    with pytest.raises(DataError, match="cannot fill 20 shards"):
        shards.prepare(store, "toy", X, y, shards=20)
    assert store.list("datasets/") == []  # nothing half-written


def test_shards_not_divisible_by_workers_mentions_the_flag(store: MemoryChannel) -> None:
    X, y = make_rows(n=50)
    manifest = shards.prepare(store, "toy", X, y, shards=4, test_fraction=0.0)
    with pytest.raises(DataError) as info:
        shards.load_worker_data(store, manifest, 0, 3)
    message = str(info.value)
    assert "--shards 3" in message and "4 shards" in message and "'toy'" in message


def test_worker_reads_strided_shards(store: MemoryChannel) -> None:
    X, y = make_rows(n=60)
    manifest = shards.prepare(store, "toy", X, y, shards=6, test_fraction=0.0)
    assert shards.shards_of_worker(manifest, 1, 3) == [1, 4]
    Xw, _ = shards.load_worker_data(store, manifest, 1, 3)
    version = manifest.dataset_version
    expected = np.concatenate(
        [codec.decode_bundle(store.get(keys.dataset_shard("toy", version, i)))["X"] for i in (1, 4)]
    )
    np.testing.assert_array_equal(Xw, expected)


def test_missing_dataset_says_not_found(store: MemoryChannel) -> None:
    with pytest.raises(DataError) as info:
        shards.read_manifest(store, "higgs")
    message = str(info.value)
    assert "not found" in message and "'higgs'" in message
    assert "lambdaml data prepare" in message


def test_missing_shard_is_a_data_error(store: MemoryChannel) -> None:
    X, y = make_rows(n=20)
    manifest = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0)
    store.delete([keys.dataset_shard("toy", manifest.dataset_version, 1)])
    with pytest.raises(DataError, match=f"missing datasets/toy/v/{manifest.dataset_version}/shards/00001"):
        shards.load_worker_data(store, manifest, 1, 2)


@pytest.mark.parametrize("where", [-1, -20, 40])
def test_corrupted_shard_is_a_data_error(store: MemoryChannel, where: int) -> None:
    X, y = make_rows(n=40)
    manifest = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0)
    key = keys.dataset_shard("toy", manifest.dataset_version, 0)
    raw = bytearray(store.get(key))
    raw[where] ^= 0x01
    store.put(key, bytes(raw))
    with pytest.raises(DataError) as info:
        shards.load_worker_data(store, manifest, 0, 2)
    assert key in str(info.value)
    shards.load_worker_data(store, manifest, 1, 2)  # the other shard is still fine


def test_shard_of_the_wrong_shape_is_a_data_error(store: MemoryChannel) -> None:
    X, y = make_rows(n=20)
    manifest = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0)
    with pytest.raises(DataError, match="expected float32 \\(10, 4\\)"):
        shards.load_worker_data(
            store, vouched_shard(store, manifest, 0, codec.encode_bundle({"X": X[:3], "y": y[:3]})), 0, 2
        )
    with pytest.raises(DataError, match="no 'y' array"):
        shards.load_worker_data(store, vouched_shard(store, manifest, 0, codec.encode_bundle({"X": X[:10]})), 0, 2)


def test_a_shard_that_is_not_the_one_the_manifest_describes_is_refused_by_name(store: MemoryChannel) -> None:
    """A well-formed shard of another version (a mixed dataset) fails its manifest's hash."""
    X, y = make_rows(n=20)
    old = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0, seed=1)
    new = shards.prepare(store, "toy", X, y, shards=2, test_fraction=0.0, seed=2, overwrite=True)
    foreign = store.get(keys.dataset_shard("toy", old.dataset_version, 0))
    store.put(keys.dataset_shard("toy", new.dataset_version, 0), foreign)
    with pytest.raises(DataError) as info:
        shards.load_worker_data(store, new, 0, 2)
    assert keys.dataset_shard("toy", new.dataset_version, 0) in str(info.value) and "\n" not in str(info.value)
    shards.load_worker_data(store, new, 1, 2)


def test_manifest_that_is_not_a_manifest(store: MemoryChannel) -> None:
    store.put(keys.dataset_current("toy"), b'{"version": "v1"}')
    store.put(keys.dataset_manifest("toy", "v1"), b'{"name": "toy"}')
    with pytest.raises(DataError, match="not a dataset manifest"):
        shards.read_manifest(store, "toy")
    X, y = make_rows(n=20)
    manifest = shards.prepare(store, "toy2", X, y, shards=2)
    key = keys.dataset_manifest("toy2", manifest.dataset_version)
    store.put(key, store.get(key).replace(b'"version": 2', b'"version": 99'))
    with pytest.raises(DataError, match="manifest version 99"):
        shards.read_manifest(store, "toy2")


def test_manifest_that_is_not_json_is_a_data_error(store: MemoryChannel) -> None:
    store.put(keys.dataset_current("toy"), b'{"version": "v1"}')
    store.put(keys.dataset_manifest("toy", "v1"), b"\x00garbage")
    with pytest.raises(DataError):
        shards.read_manifest(store, "toy")


def test_csv_typo_in_first_row_is_an_error_not_a_header(tmp_path: Path) -> None:
    path = tmp_path / "typo.csv"
    path.write_text("1,2,x\n0,3,4\n")
    with pytest.raises(DataError, match=r"typo\.csv:1: a value is not a number"):
        load_csv(path)


def test_csv_errors_name_the_file_line(tmp_path: Path) -> None:
    path = tmp_path / "lines.csv"
    path.write_text("label,a,b\n\n1,2,3\n0,3\n")
    with pytest.raises(DataError, match=r"lines\.csv:4: 2 columns, expected 3"):
        load_csv(path)
