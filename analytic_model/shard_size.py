"""The bytes a dataset's binary shards hold, as ``lambdaml data prepare`` writes them, from its shape alone.

Workers never read text: they download codec bundles of float32 rows (``X`` and ``y``), or
of CSR arrays (``indptr`` int64, ``indices`` int32, ``data`` float32, ``shape``, ``y``), and
map them. So the size that decides load time and memory is this one, not the size of the
CSV or LIBSVM file the data came from (Higgs: 8 GB of text, 1.28 GB of shards).

The model stays pure Python (no numpy, so not the codec): the header sizes below mirror
``lambdaml.codec`` (a bundle's header, an entry's, a tensor's), and a unit test holds the
result equal to the bytes of shards ``lambdaml.data.shards.prepare`` really writes.
"""

from __future__ import annotations

import math

from lambdaml.errors import ConfigError

_BUNDLE_HEADER = 16  # magic, version, entry count, table checksum
_ENTRY_HEADER = 16  # name length, tensor length
_TENSOR_HEADER = 24  # magic, version, dtype, ndim, payload length, checksum
_DIM = 8  # each dimension's length
FLOAT32, INT32, INT64 = 4, 4, 8  # what shards store: features and labels, CSR indices, CSR row pointers


def _pad8(n: int) -> int:
    return n + (-n) % 8


def _array_bytes(name: str, shape: tuple[int, ...], itemsize: int) -> int:
    """One named array in a bundle: its entry (padded name) and its tensor (padded)."""
    entry = _ENTRY_HEADER + _pad8(len(name.encode()))
    return entry + _pad8(_TENSOR_HEADER + _DIM * len(shape) + math.prod(shape) * itemsize)


def shard_bytes(rows: int, features: int, nnz: int | None = None) -> int:
    """One shard of ``rows`` rows: dense float32 ``X`` and ``y``, or (``nnz`` given) CSR arrays and ``y``."""
    labels = _array_bytes("y", (rows,), FLOAT32)
    if nnz is None:
        return _BUNDLE_HEADER + _array_bytes("X", (rows, features), FLOAT32) + labels
    csr = (
        _array_bytes("indptr", (rows + 1,), INT64)
        + _array_bytes("indices", (nnz,), INT32)
        + _array_bytes("data", (nnz,), FLOAT32)
        + _array_bytes("shape", (2,), INT64)
    )
    return _BUNDLE_HEADER + csr + labels


def binary_dataset_bytes(samples: int, features: int, *, nnz: int | None = None, shards: int = 1) -> int:
    """All training shards of ``samples`` rows of ``features`` columns (``nnz`` non-zeros where sparse).

    Rows split as ``numpy.array_split`` splits them (the first shards one row longer), so a
    dense dataset's size is exact; a sparse one's non-zeros are spread evenly, which is
    exact up to 8 bytes of padding per array and shard.
    """
    if samples < 1 or features < 1 or shards < 1:
        raise ConfigError(f"a dataset needs rows, features and shards, got {samples}, {features}, {shards}")
    if nnz is not None and not 0 <= nnz <= samples * features:
        raise ConfigError(f"nnz must be between 0 and samples x features ({samples * features}), got {nnz}")
    total = 0
    for index in range(shards):
        rows = samples // shards + (index < samples % shards)
        part = None if nnz is None else nnz // shards + (index < nnz % shards)
        total += shard_bytes(rows, features, part)
    return total


def nnz_of_shards(shard_bytes_: int, rows: int, features: int) -> int:
    """The non-zeros a CSR shard of ``rows`` rows holds, from its bytes (``shard_bytes`` backwards):
    each non-zero is an int32 index and a float32 value, so the count is exact to one a shard."""
    return max(0, (shard_bytes_ - shard_bytes(rows, features, 0)) // (INT32 + FLOAT32))
