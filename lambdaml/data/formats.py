"""Dataset file loaders. They run once, in ``lambdaml data prepare``, never in workers.

LIBSVM and CSV are text, read with a strict number syntax (no ``nan``, ``inf``, ``1_000``,
Unicode digits or spaces); NPZ is numpy's archive, read member by member, header first and
without pickle; CIFAR-10's python batches are pickles, read by an unpickler that resolves a
small allow-list of checked stand-ins for numpy's constructors.

A small file can describe a huge dataset (one LIBSVM index of 30,000,000, a zip of
compressed zeros, a 79-byte pickle of a large shape), so every loader estimates what it
is about to allocate and refuses past a memory limit (by default half this machine's
physical memory) with one line, before allocating it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import pickle
import pickletools
import re
import zipfile
import zlib
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple, overload

import numpy as np
from numpy.lib import format as npy_format

from lambdaml.data.sparse import DATA_DTYPE, INDICES_DTYPE, CSRMatrix
from lambdaml.errors import DataError, brief

log = logging.getLogger(__name__)

#: Features and labels are stored as float32: a value beyond this would silently become infinite.
FLOAT32_MAX = float(np.finfo(np.float32).max)
CIFAR10_SAMPLE_SHAPE = [3, 32, 32]
CIFAR10_CLASSES = 10
_CIFAR10_PIXELS = 3 * 32 * 32
#: A CIFAR-10 python batch holds 10,000 images of 3,072 bytes: no array in one is bigger.
_CIFAR10_BATCH_BYTES = 10_000 * _CIFAR10_PIXELS


class Loaded(NamedTuple):
    """Features, labels and, for images, a row's shape before flattening (e.g. ``[3, 32, 32]``)."""

    X: np.ndarray
    y: np.ndarray
    sample_shape: list[int] | None = None


# --- the memory bound ---------------------------------------------------------------

#: The limit where the OS does not say how much memory the machine has.
FALLBACK_MEMORY_LIMIT = 4 * 10**9
_RAISE_LIMIT = "raise the limit with --memory-limit"


def default_memory_limit() -> int:
    """Half this machine's physical memory: what a loader may allocate unless told otherwise."""
    try:
        page, pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX, or the names are unknown here
        return FALLBACK_MEMORY_LIMIT
    if page <= 0 or pages <= 0:  # sysconf answers -1 for "unknown"
        return FALLBACK_MEMORY_LIMIT
    return page * pages // 2


def format_bytes(n: float) -> str:
    """``24e9`` -> ``24.0 GB``: decimal units, as ``--memory-limit 8G`` reads them."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def _resolve_limit(memory_limit: int | None) -> int:
    if memory_limit is None:
        return default_memory_limit()
    if memory_limit <= 0:
        raise ValueError(f"memory_limit must be positive, got {memory_limit}")
    return int(memory_limit)


def _check_memory(where: str, what: str, need: int, limit: int, hint: str = _RAISE_LIMIT) -> None:
    """Refuse before allocating: ``where: what 24.0 GB, over the 6.0 GB limit; hint``."""
    if need > limit:
        raise DataError(f"{where}: {what} {format_bytes(need)}, over the {format_bytes(limit)} limit; {hint}")


def _check_file_size(path: Path, limit: int) -> None:
    """A file is read whole: one bigger than the limit cannot fit (and the arrays come on top)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    _check_memory(str(path), "the file holds", size, limit)


# --- strict numbers -----------------------------------------------------------------

# A decimal or scientific number, ASCII only. float() also takes '1_0', 'nan', 'inf',
# 'Infinity', Unicode digits and surrounding whitespace; none of those is data. The
# quantifiers are possessive: a long malformed field fails in linear time.
_NUMBER = r"[+-]?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+"
_NUMBER_RE = re.compile(_NUMBER)
_NON_FINITE_WORDS = frozenset({"nan", "inf", "infinity"})


def _is_non_finite_word(text: str) -> bool:
    """``nan``, ``-inf``, ``Infinity``: what float() reads as no finite number."""
    return text.strip().lstrip("+-").lower() in _NON_FINITE_WORDS


# --- LIBSVM -----------------------------------------------------------------------

_MAX_LIBSVM_INDEX = int(np.iinfo(np.int32).max)
_INDEX = r"[0-9]{1,10}+"  # ten digits hold every int32 index; more is refused as too large
_INDEX_RE = re.compile(_INDEX)
_SIGNED_INDEX_RE = re.compile(r"[+-]?[0-9]{1,12}")
#: A data line (comment removed): a label, then index:value pairs, separated by spaces or tabs.
_LIBSVM_LINE = re.compile(rf"[ \t]*+{_NUMBER}(?:[ \t]++{_INDEX}:{_NUMBER})*+[ \t]*+")
_BLANKS = re.compile(r"[ \t]+")
_FEATURE_SYNTAX = "an index is 1 to 10 digits, a value a decimal number such as -1.5e-3"


class _Libsvm(NamedTuple):
    """A parsed LIBSVM file: CSR arrays (columns 0-based and sorted in each row) and the widest index."""

    labels: np.ndarray
    indptr: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    max_index: int
    max_line: int  # the line of the widest index (0 when no row has a feature)


@overload
def load_libsvm(
    path: str | Path,
    n_features: int | None = None,
    sparse: Literal[False] = False,
    *,
    memory_limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]: ...
@overload
def load_libsvm(
    path: str | Path, n_features: int | None = None, *, sparse: Literal[True], memory_limit: int | None = None
) -> tuple[CSRMatrix, np.ndarray]: ...
@overload
def load_libsvm(
    path: str | Path, n_features: int | None = None, sparse: bool = False, *, memory_limit: int | None = None
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]: ...
def load_libsvm(
    path: str | Path, n_features: int | None = None, sparse: bool = False, *, memory_limit: int | None = None
) -> tuple[np.ndarray | CSRMatrix, np.ndarray]:
    """Read a LIBSVM file (``label idx:value ...``, 1-based indices, in any order within a row).

    Dense by default; with ``sparse=True`` a CSRMatrix, built straight from the parsed
    entries so the dense matrix never exists (RCV1 has 47,236 columns). A feature given
    twice in a row is an error. A dense matrix bigger than ``memory_limit`` bytes (default:
    half the physical memory) is refused before it is allocated, naming the widest index.
    """
    path = Path(path)
    limit = _resolve_limit(memory_limit)
    parsed = _parse_libsvm(path, _read_lines(path, limit))
    rows, max_index = len(parsed.labels), parsed.max_index
    width = n_features if n_features is not None else max_index
    where = f"{path}:{parsed.max_line}" if parsed.max_line else str(path)
    if max_index > width:
        raise DataError(f"{where}: feature index {max_index} exceeds n_features={width}")
    if width > _MAX_LIBSVM_INDEX:
        raise DataError(f"{path}: {width} features is more than a CSR matrix holds")
    if sparse:
        nnz = len(parsed.cols)
        need = nnz * (INDICES_DTYPE.itemsize + DATA_DTYPE.itemsize) + (rows + 1) * 8
        _check_memory(str(path), f"a CSR matrix of {nnz} values in {rows} rows takes", need, limit)
    else:
        if width > max_index:  # n_features, not the file, sets the width
            where, what = str(path), f"n_features={width} makes a dense matrix of {rows} x {width} float32 ="
        else:
            what = f"feature index {max_index} makes a dense matrix of {rows} x {width} float32 ="
        _check_memory(where, what, rows * width * 4, limit, f"use --sparse, or {_RAISE_LIMIT}")
    X = CSRMatrix(parsed.indptr, parsed.cols, parsed.values, (rows, width))
    if sparse:
        return X, parsed.labels
    dense = np.zeros(X.shape, dtype=np.float32)
    dense[X.row_ids(), X.indices] = X.data  # columns are unique per row here
    return dense, parsed.labels


def _parse_libsvm(path: Path, lines: list[str]) -> _Libsvm:
    """Parse every line; the first malformed one, in file order, is a one-line DataError.

    The fast path checks a whole line against one compiled pattern, converts its fields
    with int()/float() (safe once the pattern matched) and leaves ranges and repeats to
    vectorized checks at the end; only a line those refuse is taken apart for the message.
    """
    labels: array[float] = array("d")
    indptr: array[int] = array("q", [0])
    indices: array[int] = array("q")
    values: array[float] = array("d")
    row_lines: array[int] = array("q")
    match = _LIBSVM_LINE.fullmatch
    stopped_at = 0  # the first line the pattern refused; the rows before it are still checked
    for lineno, line in enumerate(lines, start=1):
        if "#" in line:
            line = line.partition("#")[0]
        if match(line) is None:
            if not line.strip(" \t"):
                continue
            stopped_at = lineno
            break
        fields = line.replace(":", " ").split()
        labels.append(float(fields[0]))
        indices.extend(map(int, fields[1::2]))
        values.extend(map(float, fields[2::2]))
        indptr.append(len(indices))
        row_lines.append(lineno)
    label_arr = np.frombuffer(labels, dtype=np.float64)
    ptr = np.frombuffer(indptr, dtype=np.int64)
    idx = np.frombuffer(indices, dtype=np.int64)
    val = np.frombuffer(values, dtype=np.float64)
    bad_rows = []
    bad = np.flatnonzero(~(np.abs(label_arr) <= FLOAT32_MAX))  # NaN fails this too
    if bad.size:
        bad_rows.append(int(bad[0]))
    bad = np.flatnonzero((idx < 1) | (idx > _MAX_LIBSVM_INDEX) | ~(np.abs(val) <= FLOAT32_MAX))
    if bad.size:
        bad_rows.append(_row_of(ptr, int(bad[0])))
    order, repeated_row = _column_order(ptr, idx)
    if repeated_row is not None:
        bad_rows.append(repeated_row)
    if bad_rows:
        stopped_at = int(row_lines[min(bad_rows)])
    if stopped_at:
        raise _libsvm_line_error(path, stopped_at, lines[stopped_at - 1])
    if not labels:
        raise DataError(f"{path}: no data rows")
    max_index, max_line = 0, 0
    if idx.size:
        widest = int(np.argmax(idx))
        max_index, max_line = int(idx[widest]), int(row_lines[_row_of(ptr, widest)])
    cols = idx - 1
    if order is not None:  # rows keep their place (the sort key is row first): indptr still holds
        cols, val = cols[order], val[order]
    return _Libsvm(label_arr.astype(np.float32), ptr, cols, val.astype(np.float32), max_index, max_line)


def _row_of(indptr: np.ndarray, entry: int) -> int:
    return int(np.searchsorted(indptr, entry, side="right")) - 1


def _column_order(indptr: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray | None, int | None]:
    """The order that sorts each row's columns (None if they already are), and the first row that repeats one."""
    nnz = len(cols)
    if nnz < 2:
        return None, None
    descending = cols[1:] <= cols[:-1]
    starts = indptr[1:-1]
    descending[starts[(starts > 0) & (starts < nnz)] - 1] = False  # a new row may start at any column
    if not descending.any():  # the usual case: sorted, hence unique
        return None, None
    rows = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    key = rows * (int(cols.max()) + 1) + cols
    order = np.argsort(key, kind="stable")
    key = key[order]
    repeats = np.flatnonzero(key[1:] == key[:-1])
    return order, (int(rows[order[repeats[0]]]) if repeats.size else None)


def _libsvm_line_error(path: Path, lineno: int, line: str) -> DataError:
    """What is wrong with a line the fast path refused: its first bad field, as one line."""
    where = f"{path}:{lineno}"
    fields = _BLANKS.split(line.partition("#")[0].strip(" \t"))
    label = fields[0]
    if not _NUMBER_RE.fullmatch(label):
        if _is_non_finite_word(label):
            return DataError(f"{where}: label {brief(label)} is not finite (or beyond float32's range)")
        return DataError(f"{where}: label {brief(label)} is not a number")
    if not abs(float(label)) <= FLOAT32_MAX:
        return DataError(f"{where}: label {brief(label)} is not finite (or beyond float32's range)")
    seen: set[int] = set()
    for field in fields[1:]:
        index_text, sep, value_text = field.partition(":")
        if sep and _SIGNED_INDEX_RE.fullmatch(index_text) and int(index_text) < 1:
            return DataError(f"{where}: feature index {int(index_text)} is below 1 (LIBSVM indices start at 1)")
        if sep and index_text.isascii() and index_text.isdigit() and len(index_text) > 10:
            shown = index_text if len(index_text) <= 30 else brief(index_text)
            return DataError(f"{where}: feature index {shown} is too large (at most {_MAX_LIBSVM_INDEX})")
        if not (sep and _INDEX_RE.fullmatch(index_text) and _NUMBER_RE.fullmatch(value_text)):
            if sep and _INDEX_RE.fullmatch(index_text) and _is_non_finite_word(value_text):
                return DataError(
                    f"{where}: feature {int(index_text)} has a non-finite value {brief(value_text)} "
                    "(or beyond float32's range)"
                )
            return DataError(f"{where}: feature {brief(field)} is not index:value ({_FEATURE_SYNTAX})")
        index = int(index_text)
        if index > _MAX_LIBSVM_INDEX:
            return DataError(f"{where}: feature index {index} is too large (at most {_MAX_LIBSVM_INDEX})")
        if not abs(float(value_text)) <= FLOAT32_MAX:
            return DataError(
                f"{where}: feature {index} has a non-finite value {brief(value_text)} (or beyond float32's range)"
            )
        if index in seen:
            return DataError(f"{where}: feature index {index} is given twice (a row names each feature once)")
        seen.add(index)
    return DataError(f"{where}: cannot read the line")  # not reached: the checks above mirror the fast path


# --- CSV --------------------------------------------------------------------------

_CSV_FIELD = re.compile(rf"[ \t]*+{_NUMBER}[ \t]*+")
_CSV_ROW = re.compile(rf"[ \t]*+{_NUMBER}[ \t]*+(?:,[ \t]*+{_NUMBER}[ \t]*+)*+")


def load_csv(
    path: str | Path, label_column: Literal["first", "last"] = "first", *, memory_limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read a numeric CSV with the label first or last; a first line of only names is a header.

    A value is a decimal number (spaces or tabs around it are fine); ``nan``, ``inf`` and
    ``1_000`` are errors with the file and line.
    """
    path = Path(path)
    limit = _resolve_limit(memory_limit)
    lines = [(lineno, line) for lineno, line in enumerate(_read_lines(path, limit), start=1) if line.strip()]
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
    # float64 while parsing, then the float32 copy: bounded by the file's size, checked all the same
    what = f"{len(lines)} rows x {width} columns, parsed as float64 and kept as float32, take"
    _check_memory(str(path), what, len(lines) * width * 12, limit)
    data = np.empty((len(lines), width), dtype=np.float64)
    match = _CSV_ROW.fullmatch
    for i, (lineno, line) in enumerate(lines):
        fields = line.split(",")
        if len(fields) != width:
            _check_csv_range(path, data[:i], lines)
            raise DataError(f"{path}:{lineno}: {len(fields)} columns, expected {width}")
        if match(line) is None:
            _check_csv_range(path, data[:i], lines)
            raise _csv_field_error(path, lineno, fields)
        data[i] = [float(f) for f in fields]
    _check_csv_range(path, data, lines)
    if label_column == "first":
        return data[:, 1:].astype(np.float32), data[:, 0].astype(np.float32)
    return data[:, :-1].astype(np.float32), data[:, -1].astype(np.float32)


def _check_csv_range(path: Path, data: np.ndarray, lines: list[tuple[int, str]]) -> None:
    """The first row, in file order, with a value float32 cannot hold."""
    bad = np.flatnonzero(~np.all(np.abs(data) <= FLOAT32_MAX, axis=1))
    if bad.size:
        lineno, line = lines[int(bad[0])]
        field = next(f for f in line.split(",") if not abs(float(f)) <= FLOAT32_MAX)
        raise DataError(f"{path}:{lineno}: value {brief(field.strip())} is beyond float32's range")


def _csv_field_error(path: Path, lineno: int, fields: list[str]) -> DataError:
    for column, field in enumerate(fields, start=1):
        if _CSV_FIELD.fullmatch(field):
            continue
        if _is_non_finite_word(field):
            return DataError(f"{path}:{lineno}: NaN or infinite value {brief(field.strip())} in column {column}")
        return DataError(
            f"{path}:{lineno}: a value is not a number: {brief(field)} in column {column} (write decimals like -1.5e-3)"
        )
    return DataError(f"{path}:{lineno}: cannot read the line")  # not reached: the row pattern is these fields


def _is_header(line: str) -> bool:
    """Only a line with no number in it is a header; a typo in a data row stays an error.

    float() rather than the strict pattern: a first row of ``nan`` or ``1_0`` is refused as
    data, not dropped as a header.
    """
    for field in line.split(","):
        try:
            float(field)
        except ValueError:
            continue
        return False
    return True


def _read_lines(path: Path, limit: int) -> list[str]:
    _check_file_size(path, limit)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None


# --- NPZ --------------------------------------------------------------------------

# What zipfile and numpy's header reader raise for a damaged archive: a cut or overwritten zip
# reaches zipfile's unsupported-feature paths (NotImplementedError, RuntimeError for
# "encrypted") and zlib; a mangled header reaches ast.literal_eval (TypeError, RecursionError).
_ARCHIVE_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    TypeError,
)
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first member, or an empty zip
_MAX_NPY_HEADER = 10_000  # numpy's own limit for a header it parses safely
_READ_CHUNK = 1 << 20


class _NpyHeader(NamedTuple):
    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype


def load_npz(path: str | Path, *, memory_limit: int | None = None) -> Loaded:
    """Read arrays ``X`` (rows first; images keep their shape as ``sample_shape``) and ``y``.

    Each member's .npy header is read first: an object array (which would need pickle) is
    refused, and so is one whose shape, with its float32 copy, needs more than
    ``memory_limit`` bytes: a few kB of compressed zeros can claim gigabytes.
    """
    path = Path(path)
    limit = _resolve_limit(memory_limit)
    try:
        with path.open("rb") as f:
            magic = f.read(6)
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    if magic == npy_format.MAGIC_PREFIX:
        raise DataError(f"{path} is a single .npy array; save an .npz with arrays X and y (np.savez)")
    if not magic.startswith(_ZIP_MAGICS):
        raise DataError(f"cannot read {str(path)!r} as an .npz archive: it is not a zip file")
    try:
        archive = zipfile.ZipFile(path)
    except _ARCHIVE_ERRORS as exc:
        raise DataError(f"cannot read {str(path)!r} as an .npz archive: {str(exc)[:200]}") from None
    with archive, contextlib.ExitStack() as stack:
        names = archive.namelist()
        members = {key: key if key in names else f"{key}.npy" for key in ("X", "y")}
        missing = [key for key, member in members.items() if member not in names]
        if missing:
            held = ", ".join(name.removesuffix(".npy")[:40] for name in names[:8]) or "none"
            raise DataError(f"{path} has no {' or '.join(missing)} array (it holds: {held})")
        try:
            streams = {key: stack.enter_context(archive.open(member)) for key, member in members.items()}
            headers = {key: _npy_header(stream) for key, stream in streams.items()}
        except (*_ARCHIVE_ERRORS, RecursionError) as exc:
            raise DataError(f"cannot read {str(path)!r}: {str(exc)[:200]}") from None
        _check_npz_headers(path, headers, limit)
        try:
            X, y = (_npy_data(streams[key], headers[key]) for key in ("X", "y"))
        except _ARCHIVE_ERRORS as exc:  # a truncated, corrupt or encrypted member
            raise DataError(f"cannot read {str(path)!r}: {str(exc)[:200]}") from None
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range becomes inf, refused below
        features = X.reshape(len(X), -1).astype(np.float32)
        labels = y.astype(np.float32)
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(labels))):
        raise DataError(f"{path}: NaN or infinite value (or beyond float32's range)")
    return Loaded(features, labels, [int(d) for d in X.shape[1:]] if X.ndim > 2 else None)


def _npy_header(stream: IO[bytes]) -> _NpyHeader:
    """An .npy member's shape, order and dtype; its header length is checked before it is read.

    (numpy reads a header of any claimed length before checking it, up to 4 GB.)
    """
    prefix = stream.read(8)
    if prefix[:6] != npy_format.MAGIC_PREFIX or len(prefix) < 8:
        raise ValueError("a member is not an .npy array")
    version = (prefix[6], prefix[7])
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    length = stream.read(2 if version == (1, 0) else 4)
    size = int.from_bytes(length, "little")
    if size > _MAX_NPY_HEADER:
        raise ValueError(f"an .npy header claims {size} bytes")
    header = io.BytesIO(length + stream.read(size))
    reader = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
    shape, fortran, dtype = reader(header)  # its max_header_size is _MAX_NPY_HEADER, already checked
    if any(d < 0 for d in shape):
        raise ValueError(f"an .npy header has the shape {brief(shape)}")
    return _NpyHeader(tuple(int(d) for d in shape), bool(fortran), dtype)


def _check_npz_headers(path: Path, headers: dict[str, _NpyHeader], limit: int) -> None:
    for key, header in headers.items():
        if header.dtype.hasobject:
            raise DataError(f"{path} holds Python objects (object dtype), which need pickle; save numeric arrays")
        if header.dtype.kind not in "biuf":  # a subarray or structured dtype is kind "V"
            raise DataError(f"{path}: {key} has dtype {header.dtype}; it must be numeric")
    X, y = headers["X"], headers["y"]
    if len(X.shape) < 2 or len(y.shape) != 1 or X.shape[0] != y.shape[0]:
        raise DataError(f"{path}: X {X.shape} and y {y.shape} do not match (X needs rows first, y one label per row)")
    if y.shape[0] == 0:
        raise DataError(f"{path}: no data rows")
    need = sum(math.prod(h.shape) * (h.dtype.itemsize + 4) for h in (X, y))
    what = f"reading X {X.shape} {X.dtype} and y {y.shape} {y.dtype} and converting them to float32 takes"
    _check_memory(str(path), what, need, limit)


def _npy_data(stream: IO[bytes], header: _NpyHeader) -> np.ndarray:
    """The member's data, read in chunks into one buffer of exactly the checked size."""
    nbytes = math.prod(header.shape) * header.dtype.itemsize
    buffer = np.empty(nbytes, dtype=np.uint8)
    done = 0
    while done < nbytes:
        chunk = stream.read(min(_READ_CHUNK, nbytes - done))
        if not chunk:
            raise ValueError(f"an array's data is cut short ({done} of {nbytes} bytes)")
        buffer[done : done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        done += len(chunk)
    return buffer.view(header.dtype).reshape(header.shape, order="F" if header.fortran else "C")


# --- CIFAR-10 python batches ------------------------------------------------------


class _Refused(pickle.UnpicklingError):
    """A pickle asked for something a CIFAR-10 batch never holds."""


class _RefusedGlobal(_Refused):
    """A pickle asked for a global outside the allow-list."""


class _NdarrayClass:
    """Stands for ``numpy.ndarray``, _reconstruct's first argument; not callable: ``ndarray(shape)`` allocates."""

    __slots__ = ()


_NDARRAY = _NdarrayClass()


class _PendingArray:
    """What the checked _reconstruct returns; numpy's pickle then sends the data in ``__setstate__``.

    The state is checked before anything beyond the pickle's own bytes exists: a plain
    numeric dtype, a shape whose size times the item size is the data's length, and at
    most one batch's 10000 x 3072 bytes. The array is a view of those bytes.
    """

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: object) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise _Refused("refusing an array state that is not numpy's (version, shape, dtype, order, data)")
        _, shape, dtype, fortran, raw = state
        if not (isinstance(shape, tuple) and len(shape) <= 32 and all(type(d) is int and d >= 0 for d in shape)):
            raise _Refused(f"refusing an array of shape {brief(shape)}")
        if not (isinstance(dtype, np.dtype) and _is_plain_number(dtype)):
            raise _Refused(f"refusing an array of dtype {brief(dtype)}")
        if not (isinstance(raw, bytes) and isinstance(fortran, int)):
            raise _Refused("refusing an array whose data is not a byte string")
        if math.prod(shape) * dtype.itemsize != len(raw):
            raise _Refused(f"refusing an array of shape {shape} {dtype} with {len(raw)} bytes of data")
        if len(raw) > _CIFAR10_BATCH_BYTES:
            raise _Refused(f"refusing an array of shape {shape} {dtype}: bigger than a batch's 10000 images")
        self.array = np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _is_plain_number(dtype: np.dtype) -> bool:
    """A numeric dtype with no fields or subarray (a pickled dtype's state can add them)."""
    return (
        dtype.kind in "biuf"
        and dtype.fields is None
        and dtype.subdtype is None
        and dtype.itemsize == np.dtype(dtype.kind + str(dtype.itemsize)).itemsize
    )


class _CheckedReconstruct:
    """numpy's ``_reconstruct(ndarray, (0,), b'b')``, which starts every pickled array, and only that.

    The real function allocates whatever shape it is given: 79 bytes of pickle could ask
    for gigabytes. numpy itself always passes (0,) and sends the data in the state.
    """

    __slots__ = ()

    def __call__(self, cls: object, shape: object, dtype: object) -> _PendingArray:
        if cls is not _NDARRAY or type(shape) is not tuple or shape != (0,) or dtype not in (b"b", "b"):
            raise _Refused(f"refusing an array constructed with shape {brief(shape)} (numpy pickles (0,))")
        return _PendingArray()


_PLAIN_DTYPE = re.compile(r"[<>|=]?(?:b1|[iu][1248]|f[248])")


class _CheckedDtype:
    """numpy's ``dtype('u1', False, True)``, for plain numeric type codes only, and always a fresh copy.

    A fresh copy: the pickle's BUILD that follows sets the dtype's state, and must not
    change numpy's shared uint8.
    """

    __slots__ = ()

    def __call__(self, spec: object, align: object = False, copy: object = True) -> np.dtype:
        text = spec.decode("latin-1") if isinstance(spec, bytes) else spec
        if not (isinstance(text, str) and _PLAIN_DTYPE.fullmatch(text)):
            raise _Refused(f"refusing dtype {brief(spec)} (a CIFAR-10 batch holds plain numbers)")
        return np.dtype(text, copy=True)


#: The only globals a CIFAR-10 batch refers to, as checked stand-ins for numpy's own.
#: (The files were written by numpy 1.x, which named the module numpy.core.multiarray.)
_CIFAR_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _CheckedReconstruct(),
    ("numpy._core.multiarray", "_reconstruct"): _CheckedReconstruct(),
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _CheckedDtype(),
}


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


def load_cifar10_batches(paths: Sequence[str | Path], *, memory_limit: int | None = None) -> Loaded:
    """Read CIFAR-10 *python* batches (``data_batch_1`` ... ``test_batch``) into one dataset.

    Rows are the official layout (1024 red, 1024 green, then 1024 blue values of a 32x32
    image), so ``sample_shape`` is ``[3, 32, 32]``; pixels are scaled to [0, 1]. The float32
    matrix of all batches together must fit in ``memory_limit`` bytes.
    """
    if not paths:
        raise DataError("no CIFAR-10 batch files given")
    limit = _resolve_limit(memory_limit)
    images: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    rows = 0
    for path in paths:
        data, y = _read_cifar10_batch(Path(path), limit)
        rows += len(data)
        earlier = " (with the batches before it)" if images else ""
        what = f"{rows} images{earlier} make a float32 matrix of {rows} x {_CIFAR10_PIXELS} ="
        _check_memory(str(path), what, rows * _CIFAR10_PIXELS * 4, limit)
        images.append(data)
        labels.append(y)
    X = np.empty((rows, _CIFAR10_PIXELS), dtype=np.float32)  # filled batch by batch: no concatenated copy
    start = 0
    for data in images:
        np.divide(data, np.float32(255.0), out=X[start : start + len(data)], dtype=np.float32)
        start += len(data)
    y = np.concatenate(labels) if len(labels) > 1 else labels[0]
    log.info("read %d CIFAR-10 images from %d batch files", len(y), len(paths))
    return Loaded(X, y, list(CIFAR10_SAMPLE_SHAPE))


def _read_cifar10_batch(path: Path, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """A batch's uint8 images (a view of the file's bytes) and float32 labels."""
    _check_file_size(path, limit)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    try:
        _check_opcodes(raw)
        batch = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except _RefusedGlobal as exc:
        raise DataError(f"{path}: {exc} (a CIFAR-10 batch holds only numpy arrays and lists)") from None
    except _Refused as exc:
        raise DataError(f"{path}: {exc} (a CIFAR-10 batch holds 10000 uint8 images of 3072 bytes)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise DataError(f"{path} is not a CIFAR-10 python batch: {str(exc)[:200]}") from None
    except (OverflowError, MemoryError, RecursionError):
        raise DataError(f"{path} is not a CIFAR-10 python batch: it claims an impossible size") from None
    if not isinstance(batch, dict):
        raise DataError(f"{path} is not a CIFAR-10 python batch: it holds a {type(batch).__name__}, not a dict")
    data = _unpickled(batch.get(b"data", batch.get("data")))
    targets = _unpickled(batch.get(b"labels", batch.get("labels")))
    if data is None or targets is None:
        raise DataError(f"{path} is not a CIFAR-10 python batch: no 'data' and 'labels' entries")
    if isinstance(data, _PendingArray) or isinstance(targets, _PendingArray):
        raise DataError(f"{path} is not a CIFAR-10 python batch: an array without its data")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _CIFAR10_PIXELS:
        shape = getattr(data, "shape", type(data).__name__)
        raise DataError(f"{path}: 'data' is {shape}, expected uint8 rows of {_CIFAR10_PIXELS} pixels")
    try:
        y = np.asarray(targets, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{path}: 'labels' is not a list of integers") from None
    if y.shape != (len(data),):
        raise DataError(f"{path}: {y.shape} labels for {len(data)} images")
    if len(y) and (y.min() < 0 or y.max() >= CIFAR10_CLASSES):
        raise DataError(f"{path}: labels outside 0..{CIFAR10_CLASSES - 1}")
    return data, y.astype(np.float32)


_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def _check_opcodes(raw: bytes) -> None:
    """Walk the opcodes before unpickling: the C unpickler allocates what a few bytes claim.

    A length-prefixed string's claimed size is allocated before it is read (pickletools
    checks it against the bytes there are), and a memo slot of 2**31 grows the memo to
    32 GB. A pickle of n bytes can neither hold more than n bytes nor memoize more than n objects.
    """
    for opcode, arg, _ in pickletools.genops(raw):
        if opcode.name in _MEMO_PUTS and isinstance(arg, int) and not 0 <= arg <= len(raw):
            raise _Refused(f"refusing memo slot {brief(arg)} in a pickle of {len(raw)} bytes")


def _unpickled(value: object) -> object:
    """A pending array's data once its state arrived (the pending array itself if it never did)."""
    if isinstance(value, _PendingArray) and value.array is not None:
        return value.array
    return value
