"""Preparing a dataset: read or generate its rows, then cut them into shards in storage.

What ``lambdaml data prepare`` and the demo call. Every option is checked before a long
load and before storage is contacted, so a typo fails at once; the messages name the
command's options (``--shards``, ``--format`` ...), since that is where a user meets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

import lambdaml.storage
from lambdaml import catalogue, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import formats, synthetic
from lambdaml.data.builtin import load_builtin
from lambdaml.data.shards import Manifest, check_split
from lambdaml.data.shards import prepare as write_shards
from lambdaml.data.sparse import Features
from lambdaml.errors import ConfigError

#: File formats of ``inputs``; a first file's suffix picks csv or npz, anything else reads as LIBSVM.
FILE_FORMATS = catalogue.DATASET_FORMATS
SYNTHETIC = catalogue.SYNTHETIC_DATASETS
_SUFFIXES = {".csv": "csv", ".npz": "npz"}
_INT32_MAX = int(np.iinfo(np.int32).max)


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset's rows come from: ``inputs`` (files), ``synthetic`` (a generator) or ``builtin``.

    Exactly one of the three is set; the other fields say how to read or generate it.
    """

    inputs: tuple[str, ...] = ()
    format: str | None = None  # of the inputs (FILE_FORMATS); None: from the first file's suffix
    label_column: Literal["first", "last"] = "first"  # CSV
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
        suffix = _SUFFIXES.get(Path(self.inputs[0]).suffix.lower()) if self.inputs else None
        fmt = self.synthetic or self.builtin or self.format or suffix or "libsvm"
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
        if len(self.inputs) > 1 and fmt != "cifar10":
            raise ConfigError(f"--input takes one {fmt} file; only --format cifar10 reads several")
        return fmt


def check_options(name: str, *, shards: int, test_fraction: float) -> None:
    """The dataset's name and split, checked before anything else; ConfigError otherwise."""
    keys.check_name(name, "dataset name")
    if shards < 1:
        raise ConfigError("--shards must be at least 1")
    if not 0 <= test_fraction < 1:  # NaN fails this too
        raise ConfigError(f"--test-fraction must be in [0, 1), not {test_fraction}")


def load_source(
    source: DatasetSource, *, seed: int = 0, memory_limit: int | None = None
) -> tuple[Features, Array, list[int] | None]:
    """Read or generate the rows: features, labels and (for images) a row's shape before flattening."""
    fmt = source.check(memory_limit=memory_limit)
    if source.synthetic == "rcv1":
        X, y, _ = synthetic.rcv1_like(source.rows, features=source.n_features or synthetic.RCV1_FEATURES, seed=seed)
        return X, y, None
    if source.synthetic:
        dense, y, _ = synthetic.higgs_like(source.rows, seed=seed)
        return dense, y, None
    if source.builtin:
        return load_builtin(source.builtin)
    if fmt == "cifar10":
        return formats.load_cifar10_batches(source.inputs, memory_limit=memory_limit)
    path = source.inputs[0]
    if fmt == "npz":
        return formats.load_npz(path, memory_limit=memory_limit)
    if fmt == "csv":
        return (*formats.load_csv(path, source.label_column, memory_limit=memory_limit), None)
    return (*formats.load_libsvm(path, source.n_features, sparse=source.sparse, memory_limit=memory_limit), None)


def prepare_dataset(
    storage: StorageSpec | Channel,
    name: str,
    source: DatasetSource,
    *,
    shards: int,
    test_fraction: float = 0.2,
    seed: int = 0,
    overwrite: bool = False,
    memory_limit: int | None = None,
) -> Manifest:
    """Load or generate a dataset, cut it into shards and upload them with a manifest, as a new version.

    ``storage`` is opened (and its bucket created) only after the rows are read and the split
    checked, so a bad file is reported even where storage cannot be reached. An existing
    dataset is refused unless ``overwrite`` (jobs running on it keep their version).
    """
    check_options(name, shards=shards, test_fraction=test_fraction)
    X, y, sample_shape = load_source(source, seed=seed, memory_limit=memory_limit)
    check_split(len(y), shards, test_fraction)
    store = lambdaml.storage.open_storage(storage) if isinstance(storage, StorageSpec) else storage
    store.ensure()
    return write_shards(  # refuses an existing name unless overwrite, before any upload
        store,
        name,
        X,
        y,
        shards=shards,
        test_fraction=test_fraction,
        seed=seed,
        sample_shape=sample_shape,
        overwrite=overwrite,
    )


__all__ = ["DatasetSource", "check_options", "load_source", "prepare_dataset"]
