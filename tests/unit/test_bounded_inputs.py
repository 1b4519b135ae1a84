"""Small dataset files that ask for big allocations, and numbers Python reads too kindly.

Each loader estimates what it is about to allocate and refuses past a memory limit with one
line naming the file (and line); LIBSVM and CSV numbers are plain ASCII decimals; a LIBSVM row
names each feature once; the CIFAR-10 reader bounds every array to the batch format.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from lambdaml import cli
from lambdaml.cli.data import _memory_limit
from lambdaml.data.formats import (
    default_memory_limit,
    format_bytes,
    load_cifar10_batches,
    load_csv,
    load_libsvm,
    load_npz,
)
from lambdaml.data.sparse import CSRMatrix
from lambdaml.errors import DataError

DEAD_S3 = "http://127.0.0.1:1"  # nothing listens: a case that reached S3 would say "cannot reach s3"


def wide_libsvm(path: Path, index: int, rows: int = 200, at: int = 37) -> Path:
    """``rows`` ordinary rows of 3 features; line ``at`` also names feature ``index``."""
    lines = [f"{i % 2} 1:0.5 2:1 3:-2" + (f" {index}:1" if i + 1 == at else "") for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def refusal(load: Callable[..., object], *args: object, **kwargs: object) -> str:
    """The one-line DataError a loader raises, quickly (nothing big was allocated first)."""
    start = time.perf_counter()
    with pytest.raises(DataError) as info:
        load(*args, **kwargs)
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert "\n" not in message
    return message


# --- the memory limit ---------------------------------------------------------------


def test_default_limit_is_half_the_physical_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_memory_limit() == physical // 2
    monkeypatch.setattr(os, "sysconf", lambda name: -1)  # "unknown"
    assert default_memory_limit() == 4 * 10**9
    assert format_bytes(24e9) == "24.0 GB" and format_bytes(999) == "999 B" and format_bytes(1.5e6) == "1.5 MB"


def test_huge_libsvm_index_dense_is_refused_with_file_line_and_the_sparse_hint(tmp_path: Path) -> None:
    """200 lines with one index of 30,000,000: 24 GB dense, which once grew until the kernel killed it."""
    path = wide_libsvm(tmp_path / "data.svm", 30_000_000)
    message = refusal(load_libsvm, path, memory_limit=6 * 10**9)
    assert message == (
        f"{path}:37: feature index 30000000 makes a dense matrix of 200 x 30000000 float32 = 24.0 GB, "
        "over the 6.0 GB limit; use --sparse, or raise the limit with --memory-limit"
    )
    X, y = load_libsvm(path, sparse=True, memory_limit=6 * 10**9)  # the same file is small as CSR
    assert isinstance(X, CSRMatrix) and X.shape == (200, 30_000_000) and X.nnz == 601 and len(y) == 200
    assert X.indices.max() == 30_000_000 - 1


def test_default_limit_refuses_an_index_of_two_billion(tmp_path: Path) -> None:
    path = wide_libsvm(tmp_path / "data.svm", 2_000_000_000, at=5)
    message = refusal(load_libsvm, path)  # 1.6 TB: past the default limit of any machine
    assert message.startswith(f"{path}:5: feature index 2000000000 makes a dense matrix of 200 x 2000000000")
    assert "use --sparse" in message


def test_index_1e9_names_the_file_and_line(tmp_path: Path) -> None:
    """Once a bare "Unable to allocate 749 GiB" with no file or line."""
    path = wide_libsvm(tmp_path / "big.svm", 1_000_000_000, at=123)
    message = refusal(load_libsvm, path)
    assert message.startswith(f"{path}:123: feature index 1000000000 makes a dense matrix")
    assert "= 800.0 GB, over the" in message and "--sparse" in message and "--memory-limit" in message


def test_n_features_can_be_what_makes_it_too_big(tmp_path: Path) -> None:
    path = wide_libsvm(tmp_path / "d.svm", 10)
    message = refusal(load_libsvm, path, n_features=10_000_000, memory_limit=10**9)
    assert message.startswith(f"{path}: n_features=10000000 makes a dense matrix of 200 x 10000000 float32 = 8.0 GB")


def test_the_limit_is_overridable(tmp_path: Path) -> None:
    svm = wide_libsvm(tmp_path / "d.svm", 50, rows=100)  # 100 x 50 float32 = 20 kB dense
    assert "over the 10.0 kB limit" in refusal(load_libsvm, svm, memory_limit=10_000)
    X, _ = load_libsvm(svm, memory_limit=10**9)
    assert X.shape == (100, 50)
    assert "a CSR matrix of 301 values in 100 rows takes" in refusal(load_libsvm, svm, sparse=True, memory_limit=2000)
    assert load_libsvm(svm, sparse=True, memory_limit=10**6)[0].shape == (100, 50)

    csv = tmp_path / "d.csv"
    csv.write_text("".join(f"{i % 2},{i},{i * 0.5}\n" for i in range(1000)))  # 1000 x 3
    assert f"{csv}: 1000 rows x 3 columns" in refusal(load_csv, csv, memory_limit=20_000)
    assert load_csv(csv, memory_limit=10**6)[0].shape == (1000, 2)


def test_a_file_bigger_than_the_limit_is_not_read(tmp_path: Path) -> None:
    path = wide_libsvm(tmp_path / "d.svm", 5)
    size = path.stat().st_size
    assert refusal(load_libsvm, path, memory_limit=size - 1).startswith(f"{path}: the file holds {format_bytes(size)}")


# --- strict numbers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("1 1_0:1", "feature '1_0:1' is not index:value"),  # int() reads 1_0 as 10
        ("1 1:1_0", "feature '1:1_0' is not index:value"),  # float() too
        ("1 1_0:1_0", "feature '1_0:1_0' is not index:value"),
        ("1_0 1:1", "label '1_0' is not a number"),
        ("1 \u0661:1", "is not index:value"),  # an Arabic-Indic digit one, which int() accepts
        ("1 1:\u0661", "is not index:value"),
        ("\u0661 1:1", "is not a number"),
        ("1 +3:1", "feature '+3:1' is not index:value"),  # an index is digits only
        ("1 1:1\u00a02:2", "is not index:value"),  # a no-break space is no separator
        ("1 1:0x10", "is not index:value"),
        ("1 1:1e", "is not index:value"),
    ],
)
def test_libsvm_numbers_are_plain_ascii_decimals(tmp_path: Path, line: str, words: str) -> None:
    path = tmp_path / "d.svm"
    path.write_text(f"1 1:1\n\n{line}\n0 2:2\n", encoding="utf-8")
    for sparse in (False, True):
        message = refusal(load_libsvm, path, sparse=sparse)
        assert message.startswith(f"{path}:3: ") and words in message, message


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("nan 1:1", "label 'nan' is not finite"),
        ("-inf 1:1", "label '-inf' is not finite"),
        ("Infinity 1:1", "label 'Infinity' is not finite"),
        ("1e39 1:1", "label '1e39' is not finite (or beyond float32's range)"),
        ("1 2:nan", "feature 2 has a non-finite value 'nan'"),
        ("1 2:-inf", "feature 2 has a non-finite value '-inf'"),
        ("1 2:infinity", "feature 2 has a non-finite value 'infinity'"),
        ("1 2:1e39", "feature 2 has a non-finite value '1e39' (or beyond float32's range)"),
    ],
)
def test_libsvm_non_finite_labels_and_values(tmp_path: Path, line: str, words: str) -> None:
    path = tmp_path / "d.svm"
    path.write_text(f"1 1:1\n{line}\n")
    assert words in refusal(load_libsvm, path)


def test_libsvm_index_errors_keep_their_words(tmp_path: Path) -> None:
    path = tmp_path / "d.svm"
    for line, words in [
        ("1 0:1", "feature index 0 is below 1"),
        ("1 -2:1", "feature index -2 is below 1"),
        ("1 2147483648:1", "feature index 2147483648 is too large"),
        ("1 " + "9" * 5000 + ":1", "is too large"),  # past int()'s 4300 digits: no crash
    ]:
        path.write_text(f"1 1:1\n{line}\n")
        message = refusal(load_libsvm, path)
        assert message.startswith(f"{path}:2: ") and words in message and len(message) < 400


def test_libsvm_accepts_every_decimal_form(tmp_path: Path) -> None:
    path = tmp_path / "d.svm"
    path.write_text("+1 1:.5 2:5. 3:-1e-3\t4:+2E+2   # comment\n-1.0\t007:1e0\n")
    X, y = load_libsvm(path)
    np.testing.assert_array_equal(y, [1, -1])
    expected = np.array([[0.5, 5, -1e-3, 200, 0, 0, 0], [0, 0, 0, 0, 0, 0, 1]])
    np.testing.assert_allclose(X, expected, rtol=1e-7)


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ("1,1_0", "a value is not a number: '1_0' in column 2"),
        ("1_0,1", "a value is not a number: '1_0' in column 1"),
        ("1,\u0661", "a value is not a number"),
        ("1,0x1", "a value is not a number"),
        ("1,nan", "NaN or infinite value 'nan' in column 2"),
        ("1,-Infinity", "NaN or infinite value '-Infinity'"),
        ("inf,1", "NaN or infinite value 'inf' in column 1"),
        ("1,1e39", "value '1e39' is beyond float32's range"),
    ],
)
def test_csv_numbers_are_plain_ascii_decimals(tmp_path: Path, row: str, words: str) -> None:
    path = tmp_path / "d.csv"
    path.write_text(f"label,x\n1,2\n{row}\n0,3\n", encoding="utf-8")
    message = refusal(load_csv, path)
    assert message.startswith(f"{path}:3: ") and words in message, message


def test_csv_spaces_around_a_value_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("1, 2.5 ,\t-3\n0,.5,4e1\n")
    X, y = load_csv(path)
    np.testing.assert_array_equal(X, [[2.5, -3], [0.5, 40]])
    np.testing.assert_array_equal(y, [1, 0])


# --- a feature twice on a line ------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_libsvm_duplicate_index_is_an_error_naming_file_line_and_index(tmp_path: Path, sparse: bool) -> None:
    path = tmp_path / "d.svm"
    path.write_text("1 1:1 2:2\n0 3:1 2:2 3:5\n1 3:1\n")
    message = refusal(load_libsvm, path, sparse=sparse)
    assert message.startswith(f"{path}:2: feature index 3 is given twice")


@pytest.mark.parametrize("sparse", [False, True])
def test_libsvm_unsorted_unique_indices_still_load(tmp_path: Path, sparse: bool) -> None:
    path = tmp_path / "d.svm"
    path.write_text("1 3:3 1:1 2:2\n0\n0 2:5 1:4\n1 4:1 3:2\n")
    X, y = load_libsvm(path, sparse=sparse)
    dense = X.toarray() if isinstance(X, CSRMatrix) else X
    np.testing.assert_array_equal(dense, [[1, 2, 3, 0], [0, 0, 0, 0], [4, 5, 0, 0], [0, 0, 2, 1]])
    np.testing.assert_array_equal(y, [1, 0, 0, 1])
    if isinstance(X, CSRMatrix):
        np.testing.assert_array_equal(X.indices, [0, 1, 2, 0, 1, 2, 3])  # sorted within each row


def test_the_first_problem_in_file_order_is_reported(tmp_path: Path) -> None:
    """Range and repeat checks run over all rows at the end, yet the earliest bad line is named."""
    path = tmp_path / "d.svm"
    path.write_text("1 1:1\n1 2:1 2:1\n1 1:1e39\n1 1:x\n")
    assert refusal(load_libsvm, path).startswith(f"{path}:2: feature index 2 is given twice")
    path.write_text("1 1:1\n1 1:1e39\n1 2:1 2:1\n1 1:x\n")
    assert refusal(load_libsvm, path).startswith(f"{path}:2: feature 1 has a non-finite value")
    path.write_text("1 1:1\n1 1:x\n1 1:1e39\n")
    assert refusal(load_libsvm, path).startswith(f"{path}:2: feature '1:x' is not index:value")
    csv = tmp_path / "d.csv"
    csv.write_text("1,2\n1,1e39\n1,x\n")
    assert refusal(load_csv, csv).startswith(f"{csv}:2: value '1e39' is beyond float32's range")


# --- NPZ: a member's header is read first -------------------------------------------


def npz_member(archive: zipfile.ZipFile, name: str, shape: tuple[int, ...], dtype: str, data: bytes | int) -> None:
    """Write ``name.npy``: a header, then ``data`` (bytes, or that many zero bytes streamed in 1 MB pieces)."""
    header = io.BytesIO()
    npy_format.write_array_header_1_0(header, {"descr": dtype, "fortran_order": False, "shape": shape})
    with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
        member.write(header.getvalue())  # magic, version, length and the header dict
        if isinstance(data, bytes):
            member.write(data)
        else:
            zeros = bytes(1 << 20)
            for start in range(0, data, len(zeros)):
                member.write(zeros[: min(len(zeros), data - start)])


def test_npz_bomb_is_refused_before_its_data_is_read(tmp_path: Path) -> None:
    """200 MB of compressed zeros in a file of a few hundred kB."""
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        npz_member(archive, "X", (25_000, 1000), "<f8", 25_000 * 1000 * 8)
        npz_member(archive, "y", (25_000,), "<f8", 25_000 * 8)
    assert path.stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        message = refusal(load_npz, path, memory_limit=50 * 10**6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 10**6, peak  # numpy's buffers are traced: nothing near 200 MB was allocated
    assert message.startswith(f"{path}: reading X (25000, 1000) float64 and y (25000,) float64")
    assert message.endswith("to float32 takes 300.3 MB, over the 50.0 MB limit; raise the limit with --memory-limit")


def test_npz_header_that_claims_terabytes_is_refused_under_the_default_limit(tmp_path: Path) -> None:
    path = tmp_path / "claims.npz"
    with zipfile.ZipFile(path, "w") as archive:
        npz_member(archive, "X", (10**6, 10**6), "<f8", b"")
        npz_member(archive, "y", (10**6,), "<f8", b"")
    assert "over the" in refusal(load_npz, path)


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        (npy_format.MAGIC_PREFIX + b"\x02\x00" + struct.pack("<I", 2**32 - 1), "header claims 4294967295 bytes"),
        (npy_format.MAGIC_PREFIX + b"\x09\x00", "unsupported .npy format version 9.0"),
        (b"PK\x03\x04 not an npy", "not an .npy array"),
    ],
)
def test_npz_member_headers_are_checked_before_they_are_read(tmp_path: Path, prefix: bytes, words: str) -> None:
    path = tmp_path / "bad.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("X.npy", prefix + b" " * 64)
        archive.writestr("y.npy", prefix)
    assert words in refusal(load_npz, path)


def test_npz_negative_shape_and_cut_data(tmp_path: Path) -> None:
    path = tmp_path / "neg.npz"
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (-5, 2), }".ljust(117) + "\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "X.npy", npy_format.MAGIC_PREFIX + b"\x01\x00" + struct.pack("<H", len(header)) + header.encode()
        )
        npz_member(archive, "y", (2,), "<f8", bytes(16))
    assert "shape (-5, 2)" in refusal(load_npz, path)
    cut = tmp_path / "cut.npz"
    with zipfile.ZipFile(cut, "w") as archive:
        npz_member(archive, "X", (2, 2), "<f8", bytes(8))
        npz_member(archive, "y", (2,), "<f8", bytes(16))
    assert "cut short (8 of 32 bytes)" in refusal(load_npz, cut)


def test_npz_orders_and_byte_orders_still_load(tmp_path: Path) -> None:
    X = np.arange(24, dtype=">f8").reshape(4, 3, 2)
    path = tmp_path / "ok.npz"
    np.savez_compressed(path, X=np.asfortranarray(X), y=np.array([1, 0, 1, 0], dtype=np.int16))
    loaded = load_npz(path)
    np.testing.assert_array_equal(loaded.X, X.reshape(4, 6))
    np.testing.assert_array_equal(loaded.y, [1, 0, 1, 0])
    assert loaded.sample_shape == [3, 2] and loaded.X.flags.writeable


# --- CIFAR-10: arrays bounded to the batch format -----------------------------------


def reconstruct_pickle(rows: int) -> bytes:
    """A CIFAR-10 batch whose images are numpy's _reconstruct(ndarray, (rows, 3072), 'B') with no state.

    The real _reconstruct allocates the shape it is given; under 100 bytes of pickle.
    """
    shape = b"J" + struct.pack("<i", rows) + b"M" + struct.pack("<H", 3072) + b"\x86"  # BININT, BININT2, TUPLE2
    return (
        b"}(U\x04data"
        + b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
        + shape
        + b"U\x01B\x87R"  # dtype 'B' (uint8), TUPLE3, REDUCE
        + b"U\x06labels]K\x00au."  # labels [0]
    )


def test_cifar_reconstruct_with_a_shape_of_its_own_is_refused(tmp_path: Path) -> None:
    """Today's numpy hands back uninitialized memory of that shape, which loaded as images."""
    path = tmp_path / "data_batch_1"
    path.write_bytes(reconstruct_pickle(1))
    message = refusal(load_cifar10_batches, [path])
    assert message.startswith(f"{path}: refusing an array constructed with shape (1, 3072)")


def test_cifar_tiny_pickle_asking_for_gigabytes_is_refused_in_a_bounded_process(tmp_path: Path) -> None:
    """An 87-byte pickle asked for 8 GiB of images (and their 32 GiB float32 copy); under a 2 GiB
    address-space limit the refusal must come from the checks, not from a failed allocation."""
    resource = pytest.importorskip("resource")
    del resource
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to size the address-space limit")
    rows = (8 << 30) // 3072
    payloads = {
        "shape": reconstruct_pickle(rows),
        "bytes8": b"\x80\x04\x8e" + struct.pack("<Q", 8 << 30) + b"abc.",  # claims an 8 GiB byte string
        "memo": b"\x80\x02}r\xff\xff\xff\x7f.",  # memo slot 2**31: a 32 GB memo table
    }
    assert all(len(p) < 100 for p in payloads.values())
    for name, payload in payloads.items():
        (tmp_path / name).write_bytes(payload)
    script = textwrap.dedent(
        f"""
        import json, resource
        from pathlib import Path
        from lambdaml.data.formats import load_cifar10_batches
        from lambdaml.errors import DataError
        size = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), size + (2 << 30)))
        out = {{}}
        for name in {list(payloads)!r}:
            try:
                load_cifar10_batches([Path({str(tmp_path)!r}) / name])
                out[name] = "loaded"
            except DataError as exc:
                out[name] = str(exc)
        print(json.dumps(out))
        """
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert f"refusing an array constructed with shape ({rows}, 3072)" in out["shape"], out
    assert "not a CIFAR-10 python batch" in out["bytes8"] and "8589934592" in out["bytes8"], out
    assert "refusing memo slot 2147483647" in out["memo"], out
    assert not any("impossible size" in message for message in out.values()), out


@pytest.mark.parametrize(
    ("shape", "nbytes", "dtype", "words"),
    [
        ((10_001, 3072), 10_001 * 3072, "u1", "bigger than a batch's 10000 images"),
        ((10_000, 3072), 6, "u1", "with 6 bytes of data"),
        ((2, 3072), 2 * 3072 * 2, "<U1", "refusing dtype"),
    ],
)
def test_cifar_array_state_is_bounded_to_the_batch_format(
    tmp_path: Path, shape: tuple[int, ...], nbytes: int, dtype: str, words: str
) -> None:
    class Forged:
        """Pickles like a numpy array, with the state written by hand."""

        def __reduce__(self) -> tuple[object, ...]:
            reconstruct, args, _ = np.zeros(0, np.uint8).__reduce__()  # type: ignore[str-unpack]
            return reconstruct, args, (1, shape, np.dtype(dtype), False, bytes(nbytes))

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": Forged(), b"labels": [0] * shape[0]}, protocol=3))
    message = refusal(load_cifar10_batches, [path])
    assert message.startswith(f"{path}: refusing") and words in message, message


@pytest.mark.parametrize("protocol", [2, 3, 4])
@pytest.mark.parametrize("fortran", [False, True])
def test_a_genuine_small_cifar_batch_still_loads(tmp_path: Path, protocol: int, fortran: bool) -> None:
    rng = np.random.default_rng(protocol)
    data = rng.integers(0, 256, size=(20, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, size=20)]
    path = tmp_path / "data_batch_1"
    batch = {b"data": np.asfortranarray(data) if fortran else data, b"labels": labels, b"batch_label": b"x"}
    if protocol == 2:  # as Python 2 wrote them: byte strings without _codecs (see test_formats_more.py)
        from tests.unit.test_formats_more import write_py2_batch

        write_py2_batch(path, batch)
    else:
        path.write_bytes(pickle.dumps(batch, protocol=protocol))
    X, y, shape = load_cifar10_batches([path, path], memory_limit=10**7)
    assert X.shape == (40, 3072) and X.dtype == np.float32 and shape == [3, 32, 32] and X.flags.writeable
    np.testing.assert_allclose(X[:20], data / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(X[20:], X[:20])
    np.testing.assert_array_equal(y, labels + labels)
    message = refusal(load_cifar10_batches, [path, path], memory_limit=400_000)
    assert message.startswith(f"{path}: 40 images (with the batches before it) make a float32 matrix of 40 x 3072")
    assert np.dtype("u1").fields is None  # numpy's shared dtype was never the one a pickle's BUILD touched


def test_cifar_array_without_its_state(tmp_path: Path) -> None:
    path = tmp_path / "data_batch_1"
    payload = (
        b"\x80\x02}(U\x04datacnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87RU\x06labels]u."
    )
    path.write_bytes(payload)
    assert "an array without its data" in refusal(load_cifar10_batches, [path])


def test_cifar_ndarray_is_not_callable(tmp_path: Path) -> None:
    """``numpy.ndarray`` is allow-listed as _reconstruct's argument; calling it would allocate its shape."""
    path = tmp_path / "data_batch_1"
    path.write_bytes(b"\x80\x02cnumpy\nndarray\nJ\x00\x00\x00\x7f\x85R.")
    assert "not a CIFAR-10 python batch" in refusal(load_cifar10_batches, [path])


# --- through the command line -------------------------------------------------------


def test_cli_memory_limit_refuses_before_s3_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = wide_libsvm(tmp_path / "wide.svm", 30_000)  # 200 x 30000 float32 = 24 MB dense
    argv = ["data", "prepare", "wide", "--input", str(path), "--shards", "1", "--endpoint-url", DEAD_S3]
    assert cli.main([*argv, "--memory-limit", "1M"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err == (
        f"error: {path}:37: feature index 30000 makes a dense matrix of 200 x 30000 float32 = 24.0 MB, "
        "over the 1.0 MB limit; use --sparse, or raise the limit with --memory-limit\n"
    )
    for text in ("lots", "-1G", "0"):
        assert cli.main([*argv, f"--memory-limit={text}"]) == cli.EXIT_ERROR
        assert capsys.readouterr().err == (
            f"error: --memory-limit: {text!r} is not a positive size (e.g. 8G, 500M, 1.5GiB, 1e9)\n"
        )
    synthetic = ["data", "prepare", "s", "--synthetic", "higgs", "--shards", "1", "--memory-limit", "8G"]
    assert cli.main(synthetic) == cli.EXIT_ERROR
    assert capsys.readouterr().err == "error: --memory-limit applies to --input files\n"


@pytest.mark.parametrize(("text", "size"), [("8G", 8e9), ("500M", 5e8), ("1e9", 1e9), ("1.5GiB", 1.5 * 2**30)])
def test_cli_memory_limit_sizes(text: str, size: float) -> None:
    assert _memory_limit(text) == int(size)
    assert math.isclose(_memory_limit(text.lower()) or 0, size)
