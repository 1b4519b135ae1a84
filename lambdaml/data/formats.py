"""Dataset file loaders. They run once, in ``lambdaml data prepare``, never in workers.

LIBSVM and CSV are text; NPZ is numpy's archive (read without pickle); CIFAR-10's python
batches are pickles, read by an unpickler that refuses every global outside a small
allow-list of numpy constructors.
"""

from __future__ import annotations

import io
import logging
import pickle
import zipfile
import zlib
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, overload

import numpy as np

from lambdaml.data.sparse import CSRMatrix
from lambdaml.errors import DataError, brief

log = logging.getLogger(__name__)

#: Features and labels are stored as float32: a value beyond this would silently become infinite.
FLOAT32_MAX = float(np.finfo(np.float32).max)
CIFAR10_SAMPLE_SHAPE = [3, 32, 32]
CIFAR10_CLASSES = 10
_CIFAR10_PIXELS = 3 * 32 * 32


class Loaded(NamedTuple):
    """Features, labels and, for images, a row's shape before flattening (e.g. ``[3, 32, 32]``)."""

    X: np.ndarray
    y: np.ndarray
    sample_shape: list[int] | None = None


# --- LIBSVM -----------------------------------------------------------------------


@overload
def load_libsvm(
    path: str | Path, n_features: int | None = None, sparse: Literal[False] = False
) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def load_libsvm(
    path: str | Path, n_features: int | None = None, *, sparse: Literal[True]
) -> tuple[CSRMatrix, np.ndarray]: ...
@overload
def load_libsvm(
    path: str | Path, n_features: int | None = None, sparse: bool = False
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]: ...
def load_libsvm(
    path: str | Path, n_features: int | None = None, sparse: bool = False
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """Read a LIBSVM file (``label idx:value ...``, 1-based indices).

    Dense by default; with ``sparse=True`` a CSRMatrix, built straight from the parsed
    entries so the dense matrix never exists (RCV1 has 47,236 columns). A feature given
    twice in a row keeps its last value in both forms.
    """
    path = Path(path)
    labels, indptr, cols, values, max_index = _parse_libsvm(path)
    width = n_features if n_features is not None else max_index
    if max_index > width:
        raise DataError(f"{path}: feature index {max_index} exceeds n_features={width}")
    if width > np.iinfo(np.int32).max:
        raise DataError(f"{path}: {width} features is more than a CSR matrix holds")
    X = _canonical_csr(indptr, cols, values, (len(labels), width))
    if sparse:
        return X, labels
    dense = np.zeros(X.shape, dtype=np.float32)
    dense[X.row_ids(), X.indices] = X.data  # columns are unique per row here
    return dense, labels


def _parse_libsvm(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Labels, row pointers, 0-based columns and values of every row, in file order."""
    labels: array[float] = array("d")
    indptr: array[int] = array("q", [0])
    cols: array[int] = array("q")
    values: array[float] = array("d")
    max_index = 0
    for lineno, line in enumerate(_read_lines(path), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        try:
            label = float(fields[0])
        except ValueError:
            raise DataError(f"{path}:{lineno}: label {brief(fields[0])} is not a number") from None
        if not abs(label) <= FLOAT32_MAX:
            raise DataError(f"{path}:{lineno}: label {brief(fields[0])} is not finite (or beyond float32's range)")
        labels.append(label)
        for field in fields[1:]:
            index_text, sep, value_text = field.partition(":")
            try:
                if not sep:
                    raise ValueError
                index, value = int(index_text), float(value_text)
            except ValueError:
                raise DataError(f"{path}:{lineno}: feature {brief(field)} is not index:value") from None
            if index < 1:
                raise DataError(f"{path}:{lineno}: feature index {index} is below 1 (LIBSVM indices start at 1)")
            if index > _MAX_LIBSVM_INDEX:
                raise DataError(f"{path}:{lineno}: feature index {index} is too large")
            if not abs(value) <= FLOAT32_MAX:  # NaN fails this too
                raise DataError(
                    f"{path}:{lineno}: feature {index} has a non-finite value {brief(value_text)} "
                    "(or beyond float32's range)"
                )
            cols.append(index - 1)
            values.append(value)
            max_index = max(max_index, index)
        indptr.append(len(cols))
    if not labels:
        raise DataError(f"{path}: no data rows")
    return (
        np.asarray(labels, dtype=np.float32),
        np.frombuffer(indptr, dtype=np.int64),
        np.frombuffer(cols, dtype=np.int64),
        np.asarray(values, dtype=np.float32),
        max_index,
    )


_MAX_LIBSVM_INDEX = int(np.iinfo(np.int32).max)


def _canonical_csr(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> CSRMatrix:
    """A CSR matrix with sorted, unique columns per row; a repeated feature keeps its last value."""
    rows = np.repeat(np.arange(shape[0], dtype=np.int64), np.diff(indptr))
    same_row = rows[1:] == rows[:-1]
    if np.any((cols[1:] <= cols[:-1]) & same_row):  # rare: unsorted or repeated features
        return CSRMatrix.from_coo(rows, cols, values, shape, duplicates="last")
    return CSRMatrix(indptr, cols, values, shape)


# --- CSV --------------------------------------------------------------------------


def load_csv(path: str | Path, label_column: Literal["first", "last"] = "first") -> tuple[np.ndarray, np.ndarray]:
    """Read a numeric CSV with the label first or last; a first line of only names is a header."""
    path = Path(path)
    lines = [(lineno, line) for lineno, line in enumerate(_read_lines(path), start=1) if line.strip()]
    header = lines[0] if lines and _is_header(lines[0][1]) else None
    if header is not None:
        lines = lines[1:]
    if not lines:
        if header is not None:
            raise DataError(
                f"{path}: no data rows (line {header[0]}, {brief(header[1])}, has no number in it and was read as a "
                "header; a row is comma-separated numbers)"
            )
        raise DataError(f"{path}: no data rows")
    width = len(lines[0][1].split(","))
    if width < 2:
        raise DataError(f"{path}: a row needs a label and at least one feature")
    data = np.empty((len(lines), width), dtype=np.float64)
    for i, (lineno, line) in enumerate(lines):
        fields = line.split(",")
        if len(fields) != width:
            raise DataError(f"{path}:{lineno}: {len(fields)} columns, expected {width}")
        try:
            data[i] = [float(f) for f in fields]
        except ValueError:
            raise DataError(f"{path}:{lineno}: a value is not a number") from None
        if not np.all(np.abs(data[i]) <= FLOAT32_MAX):  # NaN fails this too
            raise DataError(f"{path}:{lineno}: NaN or infinite value (or beyond float32's range)")
    if label_column == "first":
        return data[:, 1:].astype(np.float32), data[:, 0].astype(np.float32)
    return data[:, :-1].astype(np.float32), data[:, -1].astype(np.float32)


def _is_header(line: str) -> bool:
    """Only a line with no number in it is a header; a typo in a data row stays an error."""
    for field in line.split(","):
        try:
            float(field)
        except ValueError:
            continue
        return False
    return True


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None


# --- NPZ --------------------------------------------------------------------------

# What numpy and zipfile raise for a damaged archive: a cut or overwritten zip reaches zipfile's
# unsupported-feature paths (NotImplementedError, RuntimeError for "encrypted") and zlib.
_ARCHIVE_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    zlib.error,
)


def load_npz(path: str | Path) -> Loaded:
    """Read arrays ``X`` (rows first; images keep their shape as ``sample_shape``) and ``y``.

    ``allow_pickle=False``: an archive that needs pickle (object arrays) is refused.
    """
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except _ARCHIVE_ERRORS as exc:
        raise DataError(f"cannot read {str(path)!r} as an .npz archive: {str(exc)[:200]}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{path} is a single .npy array; save an .npz with arrays X and y (np.savez)")
    with archive:
        missing = [name for name in ("X", "y") if name not in archive.files]
        if missing:
            held = ", ".join(name[:40] for name in archive.files[:8]) or "none"
            raise DataError(f"{path} has no {' or '.join(missing)} array (it holds: {held})")
        try:
            X, y = archive["X"], archive["y"]
        except ValueError as exc:
            if "allow_pickle" in str(exc):
                raise DataError(
                    f"{path} holds Python objects (object dtype), which need pickle; save numeric arrays"
                ) from None
            raise DataError(f"cannot read {str(path)!r}: {str(exc)[:200]}") from None
        except _ARCHIVE_ERRORS as exc:  # a truncated, corrupt or encrypted member
            raise DataError(f"cannot read {str(path)!r}: {str(exc)[:200]}") from None
    for name, array_ in (("X", X), ("y", y)):
        if array_.dtype.kind not in "biuf":
            raise DataError(f"{path}: {name} has dtype {array_.dtype}; it must be numeric")
    if X.ndim < 2 or y.ndim != 1 or len(X) != len(y):
        raise DataError(f"{path}: X {X.shape} and y {y.shape} do not match (X needs rows first, y one label per row)")
    if len(y) == 0:
        raise DataError(f"{path}: no data rows")
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range becomes inf, refused below
        features = X.reshape(len(X), -1).astype(np.float32)
        labels = y.astype(np.float32)
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(labels))):
        raise DataError(f"{path}: NaN or infinite value (or beyond float32's range)")
    return Loaded(features, labels, [int(d) for d in X.shape[1:]] if X.ndim > 2 else None)


# --- CIFAR-10 python batches ------------------------------------------------------

_RECONSTRUCT = np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's array-unpickling function, whatever its module
#: The only globals a CIFAR-10 batch refers to: numpy's constructors for arrays and dtypes.
#: (The files were written by numpy 1.x, which named the module numpy.core.multiarray.)
_CIFAR_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle asked for a global outside the allow-list."""


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays; every other global is refused.

    ``pickle.load`` would import and call whatever a file names (``os.system`` ...);
    this reader resolves names only from an explicit allow-list and imports nothing.
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _CIFAR_GLOBALS[(module, name)]
        except KeyError:
            raise _RefusedGlobal(f"refusing to load global {module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedGlobal("refusing a persistent id")


def load_cifar10_batches(paths: Sequence[str | Path]) -> Loaded:
    """Read CIFAR-10 *python* batches (``data_batch_1`` ... ``test_batch``) into one dataset.

    Rows are the official layout (1024 red, 1024 green, then 1024 blue values of a 32x32
    image), so ``sample_shape`` is ``[3, 32, 32]``; pixels are scaled to [0, 1].
    """
    if not paths:
        raise DataError("no CIFAR-10 batch files given")
    features: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for path in paths:
        X, y = _read_cifar10_batch(Path(path))
        features.append(X)
        labels.append(y)
    X = np.concatenate(features) if len(features) > 1 else features[0]
    y = np.concatenate(labels) if len(labels) > 1 else labels[0]
    log.info("read %d CIFAR-10 images from %d batch files", len(y), len(paths))
    return Loaded(X, y, list(CIFAR10_SAMPLE_SHAPE))


def _read_cifar10_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    try:
        batch = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except _RefusedGlobal as exc:
        raise DataError(f"{path}: {exc} (a CIFAR-10 batch holds only numpy arrays and lists)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise DataError(f"{path} is not a CIFAR-10 python batch: {exc}") from None
    except (OverflowError, MemoryError):
        raise DataError(f"{path} is not a CIFAR-10 python batch: it claims an impossible size") from None
    if not isinstance(batch, dict):
        raise DataError(f"{path} is not a CIFAR-10 python batch: it holds a {type(batch).__name__}, not a dict")
    data = batch.get(b"data", batch.get("data"))
    targets = batch.get(b"labels", batch.get("labels"))
    if data is None or targets is None:
        raise DataError(f"{path} is not a CIFAR-10 python batch: no 'data' and 'labels' entries")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _CIFAR10_PIXELS:
        shape = getattr(data, "shape", type(data).__name__)
        raise DataError(f"{path}: 'data' is {shape}, expected uint8 rows of {_CIFAR10_PIXELS} pixels")
    try:
        y = np.asarray(targets, dtype=np.int64)
    except (TypeError, ValueError):
        raise DataError(f"{path}: 'labels' is not a list of integers") from None
    if y.shape != (len(data),):
        raise DataError(f"{path}: {y.shape} labels for {len(data)} images")
    if len(y) and (y.min() < 0 or y.max() >= CIFAR10_CLASSES):
        raise DataError(f"{path}: labels outside 0..{CIFAR10_CLASSES - 1}")
    return (data.astype(np.float32) / np.float32(255.0)), y.astype(np.float32)
