"""Dataset file loaders. They run once, in ``lambdaml data prepare``, never in workers."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np

from lambdaml.errors import DataError


def load_libsvm(path: str | Path, n_features: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read a LIBSVM file (``label idx:value ...``, 1-based indices) into a dense matrix."""
    path = Path(path)
    labels: list[float] = []
    rows: list[tuple[list[int], list[float]]] = []
    max_index = 0
    for lineno, line in enumerate(_read_lines(path), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        try:
            label = float(fields[0])
        except ValueError:
            raise DataError(f"{path}:{lineno}: label {fields[0]!r} is not a number") from None
        if not np.isfinite(label):
            raise DataError(f"{path}:{lineno}: label {fields[0]!r} is not finite")
        labels.append(label)
        indices: list[int] = []
        values: list[float] = []
        for field in fields[1:]:
            index_text, sep, value_text = field.partition(":")
            try:
                if not sep:
                    raise ValueError
                index, value = int(index_text), float(value_text)
            except ValueError:
                raise DataError(f"{path}:{lineno}: feature {field!r} is not index:value") from None
            if index < 1:
                raise DataError(f"{path}:{lineno}: feature index {index} is below 1 (LIBSVM indices start at 1)")
            if not np.isfinite(value):
                raise DataError(f"{path}:{lineno}: feature {index} has a non-finite value {value_text!r}")
            indices.append(index - 1)
            values.append(value)
            max_index = max(max_index, index)
        rows.append((indices, values))
    if not rows:
        raise DataError(f"{path}: no data rows")
    width = n_features if n_features is not None else max_index
    if max_index > width:
        raise DataError(f"{path}: feature index {max_index} exceeds n_features={width}")
    X = np.zeros((len(rows), width), dtype=np.float32)
    for i, (indices, values) in enumerate(rows):
        X[i, indices] = values
    return X, np.asarray(labels, dtype=np.float32)


def load_csv(path: str | Path, label_column: Literal["first", "last"] = "first") -> tuple[np.ndarray, np.ndarray]:
    """Read a numeric CSV with the label first or last; a first line of only names is a header."""
    path = Path(path)
    lines = [(lineno, line) for lineno, line in enumerate(_read_lines(path), start=1) if line.strip()]
    if lines and _is_header(lines[0][1]):
        lines = lines[1:]
    if not lines:
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
        if not np.all(np.isfinite(data[i])):
            raise DataError(f"{path}:{lineno}: NaN or infinite value")
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
