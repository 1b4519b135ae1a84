"""A separate test file (``data prepare --test``), held to its train file before anything is stored.

It is read in the train file's format, LIBSVM with the train set's width and Parquet with its
columns; these checks refuse what the train set could not score: other columns (CSV,
Parquet), another row shape (NPZ) and a label the train set lacks. Each names the test
file and its line, column or row.
"""

from __future__ import annotations

from collections.abc import Sequence

from lambdaml.arrays import Array
from lambdaml.data.formats import ParquetColumns, column_names, csv_header, csv_text, libsvm, parquet_columns
from lambdaml.data.labels import class_values, first_foreign_label
from lambdaml.errors import DataError, brief

_SHOWN_LABELS = 10


def check_labels(fmt: str, path: str, y: Array, train_y: Array, *, memory_limit: int | None = None) -> None:
    """Refuse the first row whose label the train set lacks (where the train set's labels are classes)."""
    values = class_values(train_y)
    if values is None:  # the labels are values to fit, not classes: any value may come
        return
    row = first_foreign_label(y, values)
    if row is None:
        return
    shown = ", ".join(f"{v:g}" for v in values[:_SHOWN_LABELS].tolist())
    more = f" and {len(values) - _SHOWN_LABELS} more" if len(values) > _SHOWN_LABELS else ""
    raise DataError(
        f"{_place(fmt, path, row, memory_limit)}: label {float(y[row]):g} is not one of the train set's "
        f"labels ({shown}{more})"
    )


def _place(fmt: str, path: str, row: int, memory_limit: int | None) -> str:
    """``file:line`` of a text file's row, else ``file: row index N`` (from 0)."""
    if fmt == "libsvm":
        return f"{path}:{libsvm.line_of_row(path, row, memory_limit=memory_limit)}"
    if fmt == "csv":
        return f"{path}:{csv_text.line_of_row(path, row, memory_limit=memory_limit)}"
    return f"{path}: row index {row}"


def check_csv_columns(path: str, train_path: str, width: int, train_width: int) -> None:
    """The same header, where both files have one, and the same number of columns (``width``: features)."""
    header, train_header = csv_header(path), csv_header(train_path)
    if header is not None and train_header is not None and header != train_header:
        column = next(
            i for i in range(max(len(header), len(train_header))) if header[i : i + 1] != train_header[i : i + 1]
        )
        mine, theirs = header[column : column + 1], train_header[column : column + 1]
        if not mine:
            raise DataError(f"{path}: no column {column + 1} ({brief(theirs[0])}), which the train file has")
        if not theirs:
            raise DataError(f"{path}: column {column + 1} ({brief(mine[0])}) is not in the train file")
        raise DataError(f"{path}: column {column + 1} is {brief(mine[0])}, the train file's is {brief(theirs[0])}")
    if width != train_width:
        line = csv_text.line_of_row(path, 0)
        raise DataError(f"{path}:{line}: {width + 1} columns, the train file has {train_width + 1}")


def check_shape(path: str, shape: Sequence[int], train_shape: Sequence[int]) -> None:
    """An NPZ test file's rows have the train set's shape (its features, or an image's C x H x W)."""
    if tuple(shape) != tuple(train_shape):
        raise DataError(f"{path}: X's rows have shape {tuple(shape)}, the train set's {tuple(train_shape)}")


def check_parquet_columns(path: str, train: ParquetColumns, features: Sequence[str] | None) -> None:
    """The train set's label and feature columns and, where ``--features`` named none, no other numeric ones.

    Without ``--features`` the features are every numeric column but the label, so one more
    in the test file is a different column set.
    """
    names = set(column_names(path))
    for column in (train.label, *train.features):
        if column not in names:
            raise DataError(f"{path}: no column {brief(column)}, which the train file has")
    if features is None:
        extra = [n for n in parquet_columns(path, train.label, None).features if n not in set(train.features)]
        if extra:
            raise DataError(
                f"{path}: column {brief(extra[0])} is not in the train file; drop it, or choose the features "
                "with --features"
            )


__all__ = ["check_csv_columns", "check_labels", "check_parquet_columns", "check_shape"]
