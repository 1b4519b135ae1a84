"""Parquet tables: a label column and numeric feature columns, read batch by batch into float32.

pyarrow is an optional package of the command-line environment (``pip install
'lambdaml[data]'``), imported here only when a Parquet file is read: workers and the Lambda
zip never load it. Rows go straight into one preallocated float32 matrix, a batch of one
row group at a time, so the memory beyond that matrix is about one row group's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.formats.common import check_memory, format_bytes, resolve_limit
from lambdaml.errors import DataError, brief

log = logging.getLogger(__name__)

#: The label column when ``--label`` names none.
DEFAULT_LABEL = "label"
INSTALL_HINT = "pip install 'lambdaml[data]'"
_BATCH_ROWS = 65_536  # a batch never spans row groups, so a row group of fewer rows is one batch
_SHOWN_COLUMNS = 8


class ParquetColumns(NamedTuple):
    """The columns read: the label, then the features in their matrix order."""

    label: str
    features: tuple[str, ...]


def _pyarrow() -> Any:
    """``pyarrow``, or one line saying how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise DataError(f"reading Parquet needs pyarrow: {INSTALL_HINT}") from None
    return pyarrow


@contextmanager
def _opened(path: Path) -> Iterator[Any]:
    """The file as a ``pyarrow.parquet.ParquetFile``; a missing, cut or damaged one is one DataError."""
    arrow = _pyarrow()
    try:
        table = arrow.parquet.ParquetFile(path)
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except (arrow.ArrowException, OSError) as exc:
        raise DataError(f"cannot read {str(path)!r} as Parquet: {_reason(exc)}") from None
    with table:
        try:
            yield table
        except (arrow.ArrowException, OSError) as exc:  # a damaged page, found while reading
            raise DataError(f"cannot read {str(path)!r} as Parquet: {_reason(exc)}") from None


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def column_names(path: str | Path) -> list[str]:
    """Every column's name, from the file's schema."""
    with _opened(Path(path)) as table:
        return list(table.schema_arrow.names)


def parquet_columns(
    path: str | Path, label: str | None = None, features: Sequence[str] | None = None
) -> ParquetColumns:
    """The label and feature columns ``load_parquet`` would read, from the file's schema alone."""
    path = Path(path)
    with _opened(path) as table:
        return _columns(path, table.schema_arrow, label, features, quiet=True)


def load_parquet(
    path: str | Path,
    label: str | None = None,
    features: Sequence[str] | None = None,
    *,
    memory_limit: int | None = None,
) -> tuple[Array, Array, ParquetColumns]:
    """Read a Parquet table's label and feature columns as float32 features and labels.

    ``label`` defaults to the column named ``label``; ``features`` to every other column of
    integers, floats or booleans (others are left out, with a warning). A column named in
    either that holds strings, lists or anything else that is not a number is refused, as
    is a null or a non-finite value in any column read, by name and row. The float32
    matrix, with one row group while it is read, must fit in ``memory_limit`` bytes.
    """
    path = Path(path)
    limit = resolve_limit(memory_limit)
    with _opened(path) as table:
        columns = _columns(path, table.schema_arrow, label, features, quiet=False)
        meta = table.metadata
        rows, width = int(meta.num_rows), len(columns.features)
        if rows == 0:
            raise DataError(f"{path}: no data rows")
        group = max(int(meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups))
        what = f"{rows} rows x {width} features as float32, with a row group of {format_bytes(group)} while it is read,"
        check_memory(str(path), f"{what} take", rows * (width + 1) * 4 + group, limit)
        X = np.empty((rows, width), dtype=np.float32)
        y = np.empty(rows, dtype=np.float32)
        done = 0
        for batch in _batches(table, [columns.label, *columns.features]):
            stop = done + batch.num_rows
            if stop > rows:
                raise DataError(f"{path}: holds more rows than the {rows} its footer says; the file is damaged")
            _fill(path, batch.column(columns.label), columns.label, y[done:stop], done)
            for j, name in enumerate(columns.features):
                _fill(path, batch.column(name), name, X[done:stop, j], done)
            done = stop
    if done != rows:
        raise DataError(f"{path}: {done} rows read of the {rows} its footer says; the file is damaged")
    log.info("read %d rows x %d features from %s", rows, width, path)
    return X, y, columns


def iter_parquet_features(
    path: str | Path, label: str | None = None, features: Sequence[str] | None = None
) -> Iterator[Array]:
    """A table's feature columns as float32 rows, a record batch at a time (for prediction).

    The columns are chosen as ``load_parquet`` chooses them, except that a table without a
    label column (rows to predict) is fine: every numeric column is then a feature. Memory
    stays about one row group, whatever the table's size.
    """
    path = Path(path)
    with _opened(path) as table:
        schema = table.schema_arrow
        if label is not None or DEFAULT_LABEL in schema.names:
            columns = _columns(path, schema, label, features, quiet=False).features
        else:
            columns = _unlabelled(path, schema, features)
        done = 0
        for batch in _batches(table, list(columns)):
            X = np.empty((batch.num_rows, len(columns)), dtype=np.float32)
            for j, name in enumerate(columns):
                _fill(path, batch.column(name), name, X[:, j], done)
            done += batch.num_rows
            yield X


def _unlabelled(path: Path, schema: Any, features: Sequence[str] | None) -> tuple[str, ...]:
    """The feature columns of a table with no label: those named, or every numeric one."""
    names = list(schema.names)
    types = {name: schema.field(i).type for i, name in enumerate(names)}
    if features is None:
        chosen = tuple(n for n in names if _not_numeric(types[n]) is None)
        if not chosen:
            raise DataError(f"{path}: no column of numbers (columns: {_listing(names)})")
        return chosen
    for name in features:
        if name not in types:
            raise DataError(f"{path}: no column {brief(name)} for --features (columns: {_listing(names)})")
        held = _not_numeric(types[name])
        if held:
            raise DataError(f"{path}: column {brief(name)} holds {held[0]}: {held[1]}, or leave it out of --features")
    return tuple(features)


def _batches(table: Any, columns: list[str]) -> Iterator[Any]:
    """The columns' record batches, one row group's reader at a time.

    One reader over the whole file holds on to what it has read: iterating over 2M rows x 29
    columns peaked at 720 MiB and grew with the file, against 160 MiB a row group at a time.
    """
    for group in range(table.num_row_groups):
        yield from table.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False)


def _fill(path: Path, column: Any, name: str, out: Array, start: int) -> None:
    """One batch of one column into ``out`` (a float32 view); a null or non-finite value is refused."""
    if column.null_count:
        row = start + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(
            f"{path}: column {brief(name)} has a null (missing value) at row index {row}: fill or drop the "
            "missing values, or leave the column out with --features"
        )
    values = column.to_numpy(zero_copy_only=False)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range becomes inf, refused below
        out[:] = values
    if values.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(out))
        if bad.size:
            raise DataError(
                f"{path}: column {brief(name)} has a NaN or infinite value (or one beyond float32's range) "
                f"at row index {start + int(bad[0])}"
            )


def _columns(
    path: Path, schema: Any, label: str | None, features: Sequence[str] | None, *, quiet: bool
) -> ParquetColumns:
    """Resolve and check the label and feature columns against the file's schema."""
    names = list(schema.names)
    types = {name: schema.field(i).type for i, name in enumerate(names)}
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DataError(f"{path}: two columns are named {brief(name)}; rename one")
        seen.add(name)
    if label is None:
        if DEFAULT_LABEL not in types:
            raise DataError(
                f"{path}: no column named {DEFAULT_LABEL!r}; name the label column with --label "
                f"(columns: {_listing(names)})"
            )
        label = DEFAULT_LABEL
    elif label not in types:
        raise DataError(f"{path}: no column {brief(label)} for --label (columns: {_listing(names)})")
    held = _not_numeric(types[label])
    if held:
        raise DataError(
            f"{path}: label column {brief(label)} holds {held[0]}; labels must be numbers (classes 0, 1, ...)"
        )
    if features is None:
        kinds = {n: _not_numeric(types[n]) for n in names if n != label}
        chosen = [n for n, held in kinds.items() if held is None]
        left_out = [f"{brief(n)} ({held[0]})" for n, held in kinds.items() if held is not None]
        if left_out and not quiet:
            log.warning("%s: left out of the features, not numbers: %s", path, ", ".join(left_out))
        if not chosen:
            raise DataError(f"{path}: no column of numbers besides the label {brief(label)}")
        return ParquetColumns(label, tuple(chosen))
    for name in features:
        if name not in types:
            raise DataError(f"{path}: no column {brief(name)} for --features (columns: {_listing(names)})")
        if name == label:
            raise DataError(f"{path}: --features names the label column {brief(label)}")
        held = _not_numeric(types[name])
        if held:
            raise DataError(f"{path}: column {brief(name)} holds {held[0]}: {held[1]}, or leave it out of --features")
    return ParquetColumns(label, tuple(features))


def _not_numeric(kind: Any) -> tuple[str, str] | None:
    """What a column of this Arrow type holds and what to do with it; None for integers, floats and booleans."""
    types = _pyarrow().types
    if types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind):
        return None
    if types.is_string(kind) or types.is_large_string(kind) or str(kind) == "string_view":
        return "strings", "encode it as numbers"
    if types.is_dictionary(kind):
        return "categories", "encode it as numbers"
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind) or "list" in str(kind):
        return "lists", "spread it into columns of numbers"
    if types.is_null(kind):
        return "only nulls", "drop it"
    return f"{str(kind)[:60]} values", "cast it to numbers"


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(brief(n) for n in names[:_SHOWN_COLUMNS])
    return shown + (f" and {len(names) - _SHOWN_COLUMNS} more" if len(names) > _SHOWN_COLUMNS else "")
