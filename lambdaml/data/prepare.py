"""Preparing a dataset: read or generate its rows, then cut them into shards in storage.

What ``lambdaml data prepare`` and the demo call. Every option is checked before a long
load and before storage is contacted, so a typo fails at once; the messages name the
command's options (``--shards``, ``--format`` ...), since that is where a user meets them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

import lambdaml.storage
from lambdaml import catalogue, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import formats, remote, synthetic, test_file
from lambdaml.data.builtin import load_builtin
from lambdaml.data.shards import Manifest, check_split
from lambdaml.data.shards import prepare as write_shards
from lambdaml.data.sparse import Features
from lambdaml.errors import ConfigError

#: File formats of ``inputs``; a first file's suffix picks csv, npz or parquet, anything else reads as LIBSVM.
FILE_FORMATS = catalogue.DATASET_FORMATS
SYNTHETIC = catalogue.SYNTHETIC_DATASETS
#: The share of a single input file held out for testing, unless told otherwise (none with a test file).
DEFAULT_TEST_FRACTION = 0.2
_SUFFIXES = {".csv": "csv", ".npz": "npz", ".parquet": "parquet"}
_INT32_MAX = int(np.iinfo(np.int32).max)


def file_format(path: str, given: str | None = None) -> str:
    """A file's format: the one given, else its suffix's (csv, npz, parquet), else LIBSVM."""
    return given or _SUFFIXES.get(Path(path).suffix.lower(), "libsvm")


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset's rows come from: ``inputs`` (files), ``synthetic`` (a generator) or ``builtin``.

    Exactly one of the three is set; the other fields say how to read or generate it. A path
    may be an ``s3://bucket/key`` (see ``lambdaml.data.remote``).
    """

    inputs: tuple[str, ...] = ()
    format: str | None = None  # of the inputs (FILE_FORMATS); None: from the first file's suffix
    test: str | None = None  # a test file, read in the inputs' format with the train set's width, classes, columns
    label_column: Literal["first", "last"] = "first"  # CSV
    label: str | None = None  # Parquet's label column (None: the one named "label")
    features: tuple[str, ...] | None = None  # Parquet's feature columns (None: every other numeric one)
    sparse: bool = False  # keep LIBSVM data sparse (CSR shards)
    n_features: int | None = None  # LIBSVM width, or synthetic rcv1 columns
    synthetic: str | None = None  # SYNTHETIC
    rows: int = 100_000  # of a synthetic dataset
    builtin: str | None = None  # a small dataset shipped in a package (lambdaml.data.builtin)

    def check(self, *, memory_limit: int | None = None) -> str:
        """The format the rows are read in, once every option is consistent; ConfigError otherwise.

        Reads no file: a mistake fails before a long load.
        """
        if sum(map(bool, (self.inputs, self.synthetic, self.builtin))) != 1:
            raise ConfigError("a dataset comes from exactly one of input files, a synthetic kind or a builtin name")
        if self.n_features is not None and not 1 <= self.n_features <= _INT32_MAX:
            raise ConfigError(f"--n-features must be between 1 and {_INT32_MAX} (CSR column indices are int32)")
        if self.format and not self.inputs:
            raise ConfigError("--format applies to --input files")
        if memory_limit is not None and not self.inputs:
            raise ConfigError("--memory-limit applies to --input files")
        fmt = self.synthetic or self.builtin or (file_format(self.inputs[0], self.format) if self.inputs else "libsvm")
        if self.synthetic and fmt not in SYNTHETIC:
            raise ConfigError(f"unknown synthetic dataset {fmt!r}; known: {', '.join(SYNTHETIC)}")
        if self.inputs and fmt not in FILE_FORMATS:
            raise ConfigError(f"unknown dataset format {fmt!r}; known: {', '.join(FILE_FORMATS)}")
        if self.sparse and fmt not in ("libsvm", "rcv1"):
            raise ConfigError(f"--sparse applies to LIBSVM input, not {fmt}")
        if self.n_features is not None and fmt not in ("libsvm", "rcv1"):
            raise ConfigError(f"--n-features applies to LIBSVM input and --synthetic rcv1, not {fmt}")
        if self.synthetic and self.rows < 2:
            raise ConfigError("--rows must be at least 2")
        if self.test is not None and not self.inputs:
            raise ConfigError("--test applies to --input files")
        if (self.label is not None or self.features is not None) and fmt != "parquet":
            flag = "--label" if self.label is not None else "--features"
            hint = " (CSV: --label-column)" if fmt == "csv" and self.label is not None else ""
            raise ConfigError(f"{flag} applies to Parquet input, not {fmt}{hint}")
        if self.features is not None:
            if not self.features or not all(self.features):
                raise ConfigError("--features takes column names separated by commas")
            twice = next((c for i, c in enumerate(self.features) if c in self.features[:i]), None)
            if twice is not None:
                raise ConfigError(f"--features names column {twice!r} twice")
        for path in (*self.inputs, *([self.test] if self.test else [])):
            if keys.is_s3_uri(path):
                keys.split_s3_uri(path)
        if len(self.inputs) > 1 and fmt != "cifar10":
            raise ConfigError(f"--input takes one {fmt} file; only --format cifar10 reads several")
        return fmt


def split_fraction(test_fraction: float | None, *, has_test: bool) -> float:
    """The share held out: none with a test file, else ``test_fraction`` (None: the default)."""
    if has_test:
        if test_fraction:
            raise ConfigError(
                "--test-fraction holds out part of a single --input file; with --test, the test file is the test split"
            )
        return 0.0
    return DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction


#: numpy's generators take seeds from 0 to 2**128 - 1; a job file's seed is at most 2**32 - 1.
_MAX_SEED = 2**32 - 1


def check_options(name: str, *, shards: int, test_fraction: float, seed: int = 0) -> None:
    """The dataset's name, split and seed, checked before anything else; ConfigError otherwise."""
    keys.check_name(name, "dataset name")
    if shards < 1:
        raise ConfigError("--shards must be at least 1")
    if not 0 <= seed <= _MAX_SEED:
        raise ConfigError(f"--seed must be between 0 and {_MAX_SEED}, not {seed}")
    if not 0 <= test_fraction < 1:  # NaN fails this too
        raise ConfigError(f"--test-fraction must be in [0, 1), not {test_fraction}")


class _Rows(NamedTuple):
    """What a file held: features, labels, a row's shape before flattening, and Parquet's columns read."""

    X: Features
    y: Array
    sample_shape: list[int] | None = None
    columns: formats.ParquetColumns | None = None


def load_source(
    source: DatasetSource, *, seed: int = 0, memory_limit: int | None = None
) -> tuple[Features, Array, list[int] | None]:
    """Read or generate the rows: features, labels and (for images) a row's shape before flattening.

    Local files only (``prepare_dataset`` fetches ``s3://`` ones first); the test file is not read.
    """
    X, y, sample_shape, _ = _load(source, seed=seed, memory_limit=memory_limit)
    return X, y, sample_shape


def _load(source: DatasetSource, *, seed: int, memory_limit: int | None) -> _Rows:
    fmt = source.check(memory_limit=memory_limit)
    if source.synthetic == "rcv1":
        X, y, _ = synthetic.rcv1_like(source.rows, features=source.n_features or synthetic.RCV1_FEATURES, seed=seed)
        return _Rows(X, y)
    if source.synthetic:
        dense, y, _ = synthetic.higgs_like(source.rows, seed=seed)
        return _Rows(dense, y)
    if source.builtin:
        return _Rows(*load_builtin(source.builtin))
    return _read(source, fmt, source.inputs, memory_limit=memory_limit)


def _read(
    source: DatasetSource,
    fmt: str,
    paths: tuple[str, ...],
    *,
    memory_limit: int | None,
    train: _Rows | None = None,
) -> _Rows:
    """Read input files; ``train`` given, they are the test file, read with the train set's width and columns."""
    if fmt == "cifar10":
        return _Rows(*formats.load_cifar10_batches(paths, memory_limit=memory_limit))
    path = paths[0]
    if fmt == "npz":
        return _Rows(*formats.load_npz(path, memory_limit=memory_limit))
    if fmt == "csv":
        return _Rows(*formats.load_csv(path, source.label_column, memory_limit=memory_limit))
    if fmt == "parquet":
        label, features = train.columns if train and train.columns else (source.label, source.features)
        table = formats.load_parquet(path, label, features, memory_limit=memory_limit)
        return _Rows(table[0], table[1], None, table[2])
    width = int(train.X.shape[1]) if train else source.n_features
    X, y = formats.load_libsvm(
        path, width, sparse=source.sparse, memory_limit=memory_limit, width_source="the train set" if train else None
    )
    return _Rows(X, y)


def _load_test(source: DatasetSource, fmt: str, train: _Rows, *, memory_limit: int | None) -> tuple[Features, Array]:
    """Read ``source.test`` (a local file) as the train rows were read, and hold it to them.

    It is refused, naming its line, column or row, where it has a feature beyond the train
    set's width, other columns or row shape, or a label the train set lacks.
    """
    path = source.test
    if path is None:
        raise ConfigError("no --test file to read")
    if fmt == "parquet" and train.columns is not None:
        test_file.check_parquet_columns(path, train.columns, source.features)
    rows = _read(source, fmt, (path,), memory_limit=memory_limit, train=train)
    if fmt == "csv":
        test_file.check_csv_columns(path, source.inputs[0], rows.X.shape[1], train.X.shape[1])
    if fmt == "npz":
        test_file.check_shape(path, *(r.sample_shape or [int(r.X.shape[1])] for r in (rows, train)))
    test_file.check_labels(fmt, path, rows.y, train.y, memory_limit=memory_limit)
    return rows.X, rows.y


def prepare_dataset(
    storage: StorageSpec | Channel,
    name: str,
    source: DatasetSource,
    *,
    shards: int,
    test_fraction: float | None = None,
    seed: int = 0,
    overwrite: bool = False,
    memory_limit: int | None = None,
) -> Manifest:
    """Load or generate a dataset, cut it into shards and upload them with a manifest, as a new version.

    ``test_fraction`` (default 0.2) of the rows is held out, unless ``source.test`` names a
    test file, which is then the test split. ``s3://`` inputs are downloaded through the
    storage's endpoint and credentials. ``storage`` is opened (and its bucket created) only
    once every file is read and checked, and the split too, so a bad file is reported, with
    nothing written, even where storage cannot be reached. An existing dataset is refused
    unless ``overwrite`` (jobs running on it keep their version).
    """
    fraction = split_fraction(test_fraction, has_test=source.test is not None)
    check_options(name, shards=shards, test_fraction=fraction, seed=seed)
    fmt = source.check(memory_limit=memory_limit)
    wanted = (*source.inputs, *([source.test] if source.test else []))
    with remote.local_files(wanted, storage) as local:
        local_source = replace(
            source, inputs=tuple(local[: len(source.inputs)]), test=local[-1] if source.test else None
        )
        train = _load(local_source, seed=seed, memory_limit=memory_limit)
        test = _load_test(local_source, fmt, train, memory_limit=memory_limit) if source.test else None
        check_split(len(train.y), shards, fraction)
    store = lambdaml.storage.open_storage(storage) if isinstance(storage, StorageSpec) else storage
    store.ensure()
    return write_shards(  # refuses an existing name unless overwrite, before any upload
        store,
        name,
        train.X,
        train.y,
        shards=shards,
        test_fraction=fraction,
        seed=seed,
        sample_shape=train.sample_shape,
        overwrite=overwrite,
        test=test,
    )


__all__ = [
    "DEFAULT_TEST_FRACTION",
    "DatasetSource",
    "check_options",
    "file_format",
    "load_source",
    "prepare_dataset",
    "split_fraction",
]
