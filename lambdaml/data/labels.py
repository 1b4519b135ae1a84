"""Class labels: a dataset's labels stored as classes 0..C-1, and a test set's in the train set's classes."""

from __future__ import annotations

import numpy as np

from lambdaml.arrays import Array
from lambdaml.errors import DataError

#: Most distinct integer labels read as classes; more (or fractional ones) are not a classification.
MAX_CLASSES = 65_536


def normalize_labels(y: Array, distinct: Array | None = None) -> tuple[Array, int, list[float] | None]:
    """Labels as classes 0..C-1 in sorted order, the class count, and the original values if they differ.

    Two distinct values are always two classes (``{1, 2}`` or ``{-1, 1}`` would otherwise
    read as "all positive" or need every model to guess). More distinct values are classes
    when they are integers (at most ``MAX_CLASSES``); otherwise the labels are kept as they are.
    """
    distinct = np.unique(y) if distinct is None else distinct
    values = class_values(y, distinct)
    if values is None:
        return y, len(distinct), None
    classes = to_classes(y, values)
    same = len(values) > 2 and np.array_equal(values, np.arange(len(values)))
    same = same or (len(values) <= 2 and bool(np.all(np.isin(values, (0.0, 1.0)))) and values[0] == 0)
    return classes, max(len(values), 2), None if same else [float(v) for v in values]


def class_values(y: Array, distinct: Array | None = None) -> Array | None:
    """The distinct labels, sorted, when they are classes (see normalize_labels); None when kept as they are.

    ``distinct``: ``np.unique(y)`` where the caller has it already (a sort of every label).
    """
    values = np.unique(y) if distinct is None else distinct
    integral = bool(np.all(values == np.round(values)))
    if len(values) > 2 and not (integral and len(values) <= MAX_CLASSES):
        return None
    return values


def first_foreign_label(y: Array, values: Array) -> int | None:
    """The first row whose label is not one of ``values`` (sorted), or None."""
    at = np.minimum(np.searchsorted(values, y), len(values) - 1)
    foreign = np.flatnonzero(values[at] != y)
    return int(foreign[0]) if foreign.size else None


def to_classes(y: Array, values: Array) -> Array:
    """Labels as their index in ``values`` (sorted): a test set's in the train set's classes."""
    row = first_foreign_label(y, values)
    if row is not None:
        raise DataError(f"test row {row} has label {float(y[row]):g}, which the train set lacks")
    return np.searchsorted(values, y).astype(np.float32)
