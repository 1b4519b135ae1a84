"""A small CSR sparse matrix in numpy, for sparse datasets such as RCV1 (47,236 features).

scipy is not used at run time: it would add tens of MB to the Lambda zip, and linear
models need only ``X @ w``, ``X.T @ r`` and row selection. The arrays are the usual
CSR triple (``indptr`` int64, ``indices`` int32, ``data`` float32) plus the shape, and
travel as one codec bundle, so a worker maps its shard without parsing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np

from lambdaml.arrays import Array
from lambdaml.errors import ConfigError, DataError

INDPTR_DTYPE = np.dtype(np.int64)
INDICES_DTYPE = np.dtype(np.int32)
DATA_DTYPE = np.dtype(np.float32)
_MAX_COLUMNS = int(np.iinfo(np.int32).max)


class CSRMatrix:
    """Compressed sparse rows: row ``i`` holds ``data[indptr[i]:indptr[i+1]]`` at columns ``indices[...]``.

    Duplicate columns in a row add up (as in every CSR library). The arrays may be
    read-only views of a downloaded shard; no operation writes to them.
    """

    __slots__ = ("_row_ids", "data", "indices", "indptr", "shape")
    # Make numpy defer to us, so ``r @ X`` and ``w @ X.T`` reach __rmatmul__ instead of
    # being turned into an object array.
    __array_ufunc__ = None
    ndim = 2

    def __init__(
        self,
        indptr: Array | Sequence[int],
        indices: Array | Sequence[int],
        data: Array | Sequence[float],
        shape: tuple[int, int] | Sequence[int],
        *,
        check: bool = True,
    ) -> None:
        self.indptr = np.asarray(indptr, dtype=INDPTR_DTYPE)
        self.indices = np.asarray(indices, dtype=INDICES_DTYPE)
        self.data = np.asarray(data, dtype=DATA_DTYPE)
        if len(shape) != 2:
            raise DataError(f"a CSR matrix has 2 dimensions, not shape {tuple(shape)}")
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))
        self._row_ids: Array | None = None
        if check:
            self.validate()

    # --- construction ----------------------------------------------------------

    @classmethod
    def from_dense(cls, X: Array) -> CSRMatrix:
        """The CSR form of a dense 2-D array (zeros are dropped)."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise DataError(f"from_dense needs a 2-D array, got shape {X.shape}")
        rows, cols = np.nonzero(X)
        indptr = np.zeros(X.shape[0] + 1, dtype=INDPTR_DTYPE)
        np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
        return cls(indptr, cols, X[rows, cols], X.shape)

    @classmethod
    def from_coo(
        cls,
        rows: Array,
        cols: Array,
        values: Array,
        shape: tuple[int, int],
        *,
        duplicates: Literal["sum", "last"] = "sum",
    ) -> CSRMatrix:
        """Build from (row, column, value) triples in any order; columns end up sorted in each row.

        A repeated (row, column) is summed (COO convention) or, with ``duplicates="last"``,
        the last one wins, as when a text format assigns a feature twice.
        """
        n_rows, n_cols = int(shape[0]), int(shape[1])
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        values = np.asarray(values)
        if not len(rows) == len(cols) == len(values):
            raise DataError(f"COO arrays differ in length: {len(rows)}, {len(cols)}, {len(values)}")
        if len(rows) and (rows.min() < 0 or rows.max() >= n_rows or cols.min() < 0 or cols.max() >= n_cols):
            raise DataError(f"a COO entry lies outside the shape {(n_rows, n_cols)}")
        key = rows * max(n_cols, 1) + cols
        order = np.argsort(key, kind="stable")
        key = key[order]
        values = values[order]
        if len(key):
            new_key = np.empty(len(key), dtype=bool)
            if duplicates == "last":  # keep the last of each run of equal keys (the sort is stable)
                new_key[-1] = True
                np.not_equal(key[1:], key[:-1], out=new_key[:-1])
                key, values = key[new_key], values[new_key]
            else:
                new_key[0] = True
                np.not_equal(key[1:], key[:-1], out=new_key[1:])
                starts = np.flatnonzero(new_key)
                values = np.add.reduceat(values.astype(np.float64), starts) if len(starts) < len(key) else values
                key = key[starts]
        unique_rows = key // max(n_cols, 1)
        indptr = np.zeros(n_rows + 1, dtype=INDPTR_DTYPE)
        np.cumsum(np.bincount(unique_rows, minlength=n_rows), out=indptr[1:])
        return cls(indptr, key % max(n_cols, 1), values, (n_rows, n_cols))

    @classmethod
    def vstack(cls, parts: Sequence[CSRMatrix]) -> CSRMatrix:
        """Stack matrices with the same number of columns (a worker's several shards)."""
        if not parts:
            raise DataError("vstack needs at least one matrix")
        n_cols = parts[0].shape[1]
        if any(p.shape[1] != n_cols for p in parts):
            raise DataError(f"cannot stack CSR matrices of widths {sorted({p.shape[1] for p in parts})}")
        if len(parts) == 1:
            return parts[0]
        offsets = np.cumsum([0] + [p.nnz for p in parts[:-1]])
        indptr = np.concatenate([[0]] + [p.indptr[1:] + off for p, off in zip(parts, offsets, strict=True)])
        return cls(
            indptr,
            np.concatenate([p.indices for p in parts]),
            np.concatenate([p.data for p in parts]),
            (sum(p.shape[0] for p in parts), n_cols),
            check=False,
        )

    # --- wire format -----------------------------------------------------------

    def to_bundle(self) -> dict[str, Array]:
        """The arrays to put in a codec bundle (``indptr``, ``indices``, ``data``, ``shape``)."""
        return {
            "indptr": self.indptr,
            "indices": self.indices,
            "data": self.data,
            "shape": np.asarray(self.shape, dtype=np.int64),
        }

    @classmethod
    def from_bundle(
        cls, arrays: Mapping[str, Array], *, shape: tuple[int, int] | None = None, what: str = "CSR matrix"
    ) -> CSRMatrix:
        """Rebuild and validate a matrix from decoded bundle arrays, without copying them.

        ``shape`` is what the reader expects (from a manifest); a stored ``shape`` must agree.
        """
        try:
            indptr, indices, data = arrays["indptr"], arrays["indices"], arrays["data"]
        except KeyError as exc:
            raise DataError(f"{what} has no {exc} array") from None
        for name, array, dtype in (
            ("indptr", indptr, INDPTR_DTYPE),
            ("indices", indices, INDICES_DTYPE),
            ("data", data, DATA_DTYPE),
        ):
            if array.dtype != dtype or array.ndim != 1:
                raise DataError(f"{what}: {name} is {array.dtype} {array.shape}, expected a 1-D {dtype} array")
        stored = arrays.get("shape")
        if stored is not None:
            if stored.shape != (2,) or stored.dtype.kind not in "iu":
                raise DataError(f"{what}: shape entry is {stored.dtype} {stored.shape}, expected 2 integers")
            stored_shape = (int(stored[0]), int(stored[1]))
            if shape is not None and stored_shape != tuple(shape):
                raise DataError(f"{what} has shape {stored_shape}, expected {tuple(shape)}")
            shape = stored_shape
        if shape is None:
            raise DataError(f"{what} has no shape")
        try:
            return cls(indptr, indices, data, shape)
        except DataError as exc:
            raise DataError(f"{what}: {exc}") from None

    def validate(self) -> None:
        """Check the invariants every operation relies on; a corrupt shard fails here, not in training."""
        n_rows, n_cols = self.shape
        if n_rows < 0 or n_cols < 0 or n_cols > _MAX_COLUMNS:
            raise DataError(f"invalid CSR shape {self.shape}")
        if self.indptr.ndim != 1 or self.indices.ndim != 1 or self.data.ndim != 1:
            raise DataError("CSR arrays must be 1-D")
        if len(self.indptr) != n_rows + 1:
            raise DataError(f"indptr has {len(self.indptr)} entries, expected rows + 1 = {n_rows + 1}")
        if self.indptr[0] != 0:
            raise DataError(f"indptr starts at {self.indptr[0]}, not 0")
        if n_rows and np.any(self.indptr[1:] < self.indptr[:-1]):
            raise DataError("indptr is not monotone")
        nnz = int(self.indptr[-1])
        if len(self.indices) != nnz or len(self.data) != nnz:
            raise DataError(
                f"indptr ends at {nnz}, but there are {len(self.indices)} indices and {len(self.data)} values"
            )
        if nnz and (int(self.indices.min()) < 0 or int(self.indices.max()) >= n_cols):
            raise DataError(f"a column index lies outside [0, {n_cols})")

    # --- shape -----------------------------------------------------------------

    @property
    def nnz(self) -> int:
        return len(self.data)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.data.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"CSRMatrix(shape={self.shape}, nnz={self.nnz})"

    @property
    def T(self) -> _Transposed:
        """A transposed view: enough for ``X.T @ r``."""
        return _Transposed(self)

    def row_ids(self) -> Array:
        """The row of every stored value (computed once per matrix)."""
        if self._row_ids is None:
            self._row_ids = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))
        return self._row_ids

    # --- products --------------------------------------------------------------

    def __matmul__(self, other: Array) -> Array:
        """``X @ w``: one value per row (a matrix ``W`` of k columns gives k values per row)."""
        w = np.asarray(other)
        if w.ndim not in (1, 2) or w.shape[0] != self.shape[1]:
            raise ValueError(f"cannot multiply a {self.shape} CSR matrix by an array of shape {w.shape}")
        products = self.data * w[self.indices] if w.ndim == 1 else self.data[:, None] * w[self.indices]
        out = np.zeros((self.shape[0], *w.shape[1:]), dtype=np.result_type(self.data, w))
        starts = self.indptr[:-1]
        nonempty = starts < self.indptr[1:]
        if self.nnz:
            # reduceat over the non-empty rows only: an empty row would otherwise pick up its neighbour's value
            out[nonempty] = np.add.reduceat(products, starts[nonempty], axis=0)
        return out

    def __rmatmul__(self, other: Array) -> Array:
        """``r @ X``, the same as ``X.T @ r``."""
        r = np.asarray(other)
        if r.ndim != 1:
            raise ValueError(f"cannot multiply an array of shape {r.shape} by a {self.shape} CSR matrix")
        return self.rmatvec(r)

    def rmatvec(self, r: Array) -> Array:
        """``X.T @ r`` by a weighted bincount over the columns (float64 result)."""
        r = np.asarray(r)
        if r.ndim not in (1, 2) or r.shape[0] != self.shape[0]:
            raise ValueError(f"cannot multiply the transpose of a {self.shape} CSR matrix by shape {r.shape}")
        n_cols = self.shape[1]
        if r.ndim == 1:
            return np.bincount(self.indices, weights=self.data * r[self.row_ids()], minlength=n_cols)
        spread = r[self.row_ids()]
        return np.stack(
            [np.bincount(self.indices, weights=self.data * spread[:, k], minlength=n_cols) for k in range(r.shape[1])],
            axis=1,
        ).reshape(n_cols, r.shape[1])

    # --- rows ------------------------------------------------------------------

    def __getitem__(self, rows: Array | Sequence[int] | slice) -> CSRMatrix:
        """Rows by an integer index array (any order, repeats, empty), a boolean mask or a slice."""
        n_rows = self.shape[0]
        index: Array
        if isinstance(rows, slice):
            start, stop, step = rows.indices(n_rows)
            if step == 1:
                stop = max(start, stop)
                lo, hi = self.indptr[start], self.indptr[stop]
                return CSRMatrix(
                    self.indptr[start : stop + 1] - lo,
                    self.indices[lo:hi],
                    self.data[lo:hi],
                    (stop - start, self.shape[1]),
                    check=False,
                )
            index = np.arange(start, stop, step, dtype=np.int64)
        else:
            index = np.asarray(rows)
            if index.dtype == bool:
                if index.shape != (n_rows,):
                    raise IndexError(f"boolean row mask of shape {index.shape} for {n_rows} rows")
                index = np.flatnonzero(index)
            elif index.size == 0:
                index = np.zeros(0, dtype=np.int64)
            elif index.ndim != 1 or index.dtype.kind not in "iu":
                raise IndexError("CSR rows are selected by a 1-D integer array, a boolean mask or a slice")
            index = index.astype(np.int64, copy=False)
            if index.size and (index.min() < -n_rows or index.max() >= n_rows):
                raise IndexError(f"row index out of range for {n_rows} rows")
            index = np.where(index < 0, index + n_rows, index)
        starts = self.indptr[index]
        lengths = self.indptr[index + 1] - starts
        indptr = np.zeros(len(index) + 1, dtype=INDPTR_DTYPE)
        np.cumsum(lengths, out=indptr[1:])
        # position in the source of every selected value: each row's start, counting up
        take = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1], dtype=np.int64)
        return CSRMatrix(indptr, self.indices[take], self.data[take], (len(index), self.shape[1]), check=False)

    def toarray(self) -> Array:
        """The dense float32 matrix (duplicates added up); for tests and small data only."""
        out = np.zeros(self.shape, dtype=self.data.dtype)
        np.add.at(out, (self.row_ids(), self.indices), self.data)
        return out


class _Transposed:
    """``X.T`` of a CSRMatrix: supports only ``@`` with a dense vector or matrix."""

    __slots__ = ("base",)
    __array_ufunc__ = None
    ndim = 2

    def __init__(self, base: CSRMatrix) -> None:
        self.base = base

    @property
    def shape(self) -> tuple[int, int]:
        return (self.base.shape[1], self.base.shape[0])

    @property
    def T(self) -> CSRMatrix:
        return self.base

    def __matmul__(self, other: Array) -> Array:
        return self.base.rmatvec(other)

    def __rmatmul__(self, other: Array) -> Array:
        """``w @ X.T``, the same as ``X @ w``."""
        return self.base @ other


#: What a model's ``X`` may be: a dense 2-D array or a CSR matrix.
Features: TypeAlias = Array | CSRMatrix


def require_dense(X: Features, who: str) -> Array:
    """``X`` as a dense array, for models that have no sparse path; a CSR matrix is refused.

    Densifying silently could need gigabytes (RCV1: 47,236 columns), so it is a user error.
    """
    if isinstance(X, CSRMatrix):
        raise ConfigError(
            f"{who} needs dense features, but the dataset is sparse (csr); "
            "use a linear model (lr, svm, softmax or multiclass_svm)"
        )
    return X
