"""Numeric CSV with the label first or last; a first line of only names is a header."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.formats.common import (
    FLOAT32_MAX,
    NUMBER,
    check_memory,
    is_non_finite_word,
    read_lines,
    resolve_limit,
)
from lambdaml.errors import DataError, brief

# --- CSV --------------------------------------------------------------------------

_CSV_FIELD = re.compile(rf"[ \t]*+{NUMBER}[ \t]*+")
_CSV_ROW = re.compile(rf"[ \t]*+{NUMBER}[ \t]*+(?:,[ \t]*+{NUMBER}[ \t]*+)*+")


def load_csv(
    path: str | Path, label_column: Literal["first", "last"] = "first", *, memory_limit: int | None = None
) -> tuple[Array, Array]:
    """Read a numeric CSV with the label first or last; a first line of only names is a header.

    A value is a decimal number (spaces or tabs around it are fine); ``nan``, ``inf`` and
    ``1_000`` are errors with the file and line.
    """
    path = Path(path)
    limit = resolve_limit(memory_limit)
    header, lines = _data_lines(path, limit)
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
    check_memory(str(path), what, len(lines) * width * 12, limit)
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


def csv_header(path: str | Path) -> list[str] | None:
    """The names in the header line of a CSV file load_csv read (spaces around them dropped), or None.

    Reads up to the first line that is not blank, not the whole file.
    """
    try:
        with Path(path).open(encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    return [name.strip() for name in first.split(",")] if first and _is_header(first) else None


def line_of_row(path: str | Path, row: int, *, memory_limit: int | None = None) -> int:
    """The line of data row ``row`` (from 0) of a file load_csv read."""
    _, lines = _data_lines(Path(path), resolve_limit(memory_limit))
    return lines[row][0]


def _data_lines(path: Path, limit: int) -> tuple[tuple[int, str] | None, list[tuple[int, str]]]:
    """The header line, if any, and the data lines, each with its line number; blank lines skipped."""
    lines = [(lineno, line) for lineno, line in enumerate(read_lines(path, limit), start=1) if line.strip()]
    if lines and _is_header(lines[0][1]):
        return lines[0], lines[1:]
    return None, lines


def _check_csv_range(path: Path, data: Array, lines: list[tuple[int, str]]) -> None:
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
        if is_non_finite_word(field):
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
