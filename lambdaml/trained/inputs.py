"""What a trained model accepts as ``X``: a numpy array, a scipy sparse matrix, a pandas DataFrame.

Every input becomes what training saw: float32 rows of the model's width, dense or CSR. The
width is checked first, so a table with a column too many or too few fails in one line
instead of multiplying into a wrong answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.sparse import CSRMatrix, Features
from lambdaml.errors import DataError


def as_features(X: Any, n_features: int, *, dense: bool) -> Features:
    """``X`` as float32 rows of ``n_features`` columns (CSR kept sparse unless ``dense``); DataError otherwise."""
    columns: list[Any] | None = None  # a DataFrame's column names, for naming a bad value's column
    if isinstance(X, CSRMatrix):
        features: Features = X
    elif hasattr(X, "tocsr") and hasattr(X, "nnz"):  # scipy.sparse, without importing scipy
        csr = X.tocsr()
        if not csr.has_canonical_format:  # sum_duplicates works in place: not on the caller's matrix
            csr = csr.copy()
            csr.sum_duplicates()
        features = CSRMatrix(csr.indptr, csr.indices, csr.data.astype(np.float32), csr.shape)
    else:
        if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # a pandas DataFrame
            _check_numeric_columns(X)
            columns = list(X.columns)
            X = X.to_numpy(dtype=np.float64)
        try:
            array = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"the input is not numeric rows: {exc}") from None
        if array.ndim == 1 and n_features == 1:
            array = array[:, None]
        if array.ndim != 2:
            raise DataError(f"the input has shape {array.shape}; a model takes 2-D rows (samples x features)")
        features = array
    width = features.shape[1]
    if width != n_features:
        raise DataError(f"the input has {width} features; the model was trained on {n_features}")
    if isinstance(features, CSRMatrix):
        values: Array = features.data
    else:
        values = features
        bad = ~(np.abs(values) <= np.finfo(np.float32).max)  # NaN is bad too
        if bad.any():
            row, column = (int(i) for i in np.argwhere(bad)[0])
            where = f"row {row}, column {columns[column]!r}" if columns is not None else f"row {row}, column {column}"
            raise DataError(f"the input holds NaN, infinite or beyond-float32 values (first at {where})")
        features = np.ascontiguousarray(values, dtype=np.float32)
    if isinstance(features, CSRMatrix) and not np.all(np.isfinite(values)):
        raise DataError("the input holds NaN or infinite values")
    if dense and isinstance(features, CSRMatrix):
        features = features.toarray()
    return features


def _check_numeric_columns(frame: Any) -> None:
    for name, dtype in frame.dtypes.items():
        if getattr(dtype, "kind", "O") not in "biuf":
            raise DataError(f"column {name!r} is {dtype}, not numeric: encode it as numbers or drop it")


def as_labels(y: Any) -> Array:
    """Labels as a 1-D float64 array (a pandas Series or list alike)."""
    labels = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y, dtype=np.float64)
    if labels.ndim != 1:
        raise DataError(f"labels have shape {labels.shape}; expected one label per row")
    return labels


__all__ = ["as_features", "as_labels"]
