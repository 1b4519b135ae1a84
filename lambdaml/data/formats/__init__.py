"""Dataset file loaders. They run once, in ``lambdaml data prepare``, never in workers.

LIBSVM and CSV are text, read with a strict number syntax (no ``nan``, ``inf``, ``1_000``,
Unicode digits or spaces); NPZ is numpy's archive, read member by member, header first and
without pickle; Parquet is read with pyarrow (imported only then), batch by batch;
CIFAR-10's python batches are pickles, read by an unpickler that resolves a small
allow-list of checked stand-ins for numpy's constructors.

A small file can describe a huge dataset (one LIBSVM index of 30,000,000, a zip of
compressed zeros, a 79-byte pickle of a large shape), so every loader estimates what it
is about to allocate and refuses past a memory limit (by default half this machine's
physical memory) with one line, before allocating it.
"""

from __future__ import annotations

from lambdaml.data.formats.cifar import CIFAR10_CLASSES, CIFAR10_SAMPLE_SHAPE, load_cifar10_batches
from lambdaml.data.formats.common import FLOAT32_MAX, Loaded, default_memory_limit, format_bytes
from lambdaml.data.formats.csv_text import csv_header, load_csv
from lambdaml.data.formats.libsvm import load_libsvm
from lambdaml.data.formats.npz import load_npz
from lambdaml.data.formats.parquet import (
    ParquetColumns,
    column_names,
    iter_parquet_features,
    load_parquet,
    parquet_columns,
)

__all__ = [
    "CIFAR10_CLASSES",
    "CIFAR10_SAMPLE_SHAPE",
    "FLOAT32_MAX",
    "Loaded",
    "ParquetColumns",
    "column_names",
    "csv_header",
    "default_memory_limit",
    "format_bytes",
    "iter_parquet_features",
    "load_cifar10_batches",
    "load_csv",
    "load_libsvm",
    "load_npz",
    "load_parquet",
    "parquet_columns",
]
