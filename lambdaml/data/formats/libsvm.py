"""LIBSVM text (``label idx:value ...``, 1-based indices), dense or kept sparse (CSR)."""

from __future__ import annotations

import itertools
import re
from array import array
from pathlib import Path
from typing import Literal, NamedTuple, overload

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.formats.common import (
    FLOAT32_MAX,
    NUMBER,
    NUMBER_RE,
    RAISE_LIMIT,
    check_memory,
    is_non_finite_word,
    read_lines,
    resolve_limit,
)
from lambdaml.data.sparse import DATA_DTYPE, INDICES_DTYPE, CSRMatrix
from lambdaml.errors import DataError, brief

# --- LIBSVM -----------------------------------------------------------------------

_MAX_LIBSVM_INDEX = int(np.iinfo(np.int32).max)
_INDEX = r"[0-9]{1,10}+"  # ten digits hold every int32 index; more is refused as too large
_INDEX_RE = re.compile(_INDEX)
_SIGNED_INDEX_RE = re.compile(r"[+-]?[0-9]{1,12}")
#: A data line (comment removed): a label, then index:value pairs, separated by spaces or tabs.
_LIBSVM_LINE = re.compile(rf"[ \t]*+{NUMBER}(?:[ \t]++{_INDEX}:{NUMBER})*+[ \t]*+")
_BLANKS = re.compile(r"[ \t]+")
_FEATURE_SYNTAX = "an index is 1 to 10 digits, a value a decimal number such as -1.5e-3"


class _Libsvm(NamedTuple):
    """A parsed LIBSVM file: CSR arrays (columns 0-based and sorted in each row) and the widest index."""

    labels: Array
    indptr: Array
    cols: Array
    values: Array
    max_index: int
    max_line: int  # the line of the widest index (0 when no row has a feature)


@overload
def load_libsvm(
    path: str | Path,
    n_features: int | None = None,
    sparse: Literal[False] = False,
    *,
    memory_limit: int | None = None,
    width_source: str | None = None,
) -> tuple[Array, Array]: ...
@overload
def load_libsvm(
    path: str | Path,
    n_features: int | None = None,
    *,
    sparse: Literal[True],
    memory_limit: int | None = None,
    width_source: str | None = None,
) -> tuple[CSRMatrix, Array]: ...
@overload
def load_libsvm(
    path: str | Path,
    n_features: int | None = None,
    sparse: bool = False,
    *,
    memory_limit: int | None = None,
    width_source: str | None = None,
) -> tuple[Array | CSRMatrix, Array]: ...
def load_libsvm(
    path: str | Path,
    n_features: int | None = None,
    sparse: bool = False,
    *,
    memory_limit: int | None = None,
    width_source: str | None = None,
) -> tuple[Array | CSRMatrix, Array]:
    """Read a LIBSVM file (``label idx:value ...``, 1-based indices, in any order within a row).

    Dense by default; with ``sparse=True`` a CSRMatrix, built straight from the parsed
    entries so the dense matrix never exists (RCV1 has 47,236 columns). A feature given
    twice in a row is an error. A dense matrix bigger than ``memory_limit`` bytes (default:
    half the physical memory) is refused before it is allocated, naming the widest index.
    """
    path = Path(path)
    limit = resolve_limit(memory_limit)
    parsed = _parse_libsvm(path, read_lines(path, limit))
    rows, max_index = len(parsed.labels), parsed.max_index
    width = n_features if n_features is not None else max_index
    where = f"{path}:{parsed.max_line}" if parsed.max_line else str(path)
    if max_index > width:
        if width_source:
            raise DataError(f"{where}: feature index {max_index} is beyond {width_source}'s {width} features")
        raise DataError(f"{where}: feature index {max_index} exceeds n_features={width}")
    if width > _MAX_LIBSVM_INDEX:
        raise DataError(f"{path}: {width} features is more than a CSR matrix holds")
    if sparse:
        nnz = len(parsed.cols)
        need = nnz * (INDICES_DTYPE.itemsize + DATA_DTYPE.itemsize) + (rows + 1) * 8
        check_memory(str(path), f"a CSR matrix of {nnz} values in {rows} rows takes", need, limit)
    else:
        if width > max_index:  # n_features, not the file, sets the width
            where, what = str(path), f"n_features={width} makes a dense matrix of {rows} x {width} float32 ="
        else:
            what = f"feature index {max_index} makes a dense matrix of {rows} x {width} float32 ="
        check_memory(where, what, rows * width * 4, limit, f"use --sparse, or {RAISE_LIMIT}")
    X = CSRMatrix(parsed.indptr, parsed.cols, parsed.values, (rows, width))
    if sparse:
        return X, parsed.labels
    dense = np.zeros(X.shape, dtype=np.float32)
    dense[X.row_ids(), X.indices] = X.data  # columns are unique per row here
    return dense, parsed.labels


def line_of_row(path: str | Path, row: int, *, memory_limit: int | None = None) -> int:
    """The line of data row ``row`` (from 0) of a file load_libsvm read: blank and comment lines skipped."""
    lines = read_lines(Path(path), resolve_limit(memory_limit))
    data = (n for n, line in enumerate(lines, start=1) if line.partition("#")[0].strip(" \t"))
    return next(itertools.islice(data, row, None))


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


def _row_of(indptr: Array, entry: int) -> int:
    return int(np.searchsorted(indptr, entry, side="right")) - 1


def _column_order(indptr: Array, cols: Array) -> tuple[Array | None, int | None]:
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
    if not NUMBER_RE.fullmatch(label):
        if is_non_finite_word(label):
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
        if not (sep and _INDEX_RE.fullmatch(index_text) and NUMBER_RE.fullmatch(value_text)):
            if sep and _INDEX_RE.fullmatch(index_text) and is_non_finite_word(value_text):
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
