"""Binary shards: ``lambdaml data prepare`` writes a dataset's as a new version, workers map them.

Each shard is one codec bundle, checked on load against the version's manifest
(``data.manifest``); the versions and the pointer to the current one are ``data.versions``'s.
A dense shard holds ``X`` (float32 rows) and ``y``; a CSR shard (``manifest.format ==
"csr"``) holds ``indptr``, ``indices``, ``data``, ``shape`` and ``y``. Workers never parse
text: they download their shard and ``np.frombuffer`` it. Class labels are stored as
0..C-1 (``label_values`` keeps what the file called them).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

import numpy as np

from lambdaml import codec, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.data.labels import class_values, normalize_labels, to_classes
from lambdaml.data.manifest import FORMATS, Manifest, content_hash, shards_of_worker
from lambdaml.data.sparse import CSRMatrix, Features
from lambdaml.data.versions import check_absent, current_version, new_version, publish, read_manifest
from lambdaml.errors import CodecError, DataError, KeyNotFound
from lambdaml.storage import put_json

log = logging.getLogger(__name__)

#: More distinct labels than this, or any that is not an integer, look like a regression target.
REGRESSION_HINT_VALUES = 100


def _say_if_regression(name: str, values: Array) -> None:
    """One warning when the distinct labels look like a regression target: the classifiers here refuse them."""
    fractional = not bool(np.all(values == np.round(values)))
    if (fractional and len(values) > 2) or len(values) > REGRESSION_HINT_VALUES:
        kind = "non-integer values" if fractional else "values"
        log.warning(
            "dataset %s: its labels look like a regression target (%d distinct %s); LambdaML trains classifiers "
            "and clusterings, which take class labels",
            name,
            len(values),
            kind,
        )


def prepare(
    store: Channel,
    name: str,
    X: Features,
    y: Array,
    *,
    shards: int,
    test_fraction: float = 0.2,
    seed: int = 0,
    sample_shape: list[int] | None = None,
    overwrite: bool = False,
    test: tuple[Features, Array] | None = None,
) -> Manifest:
    """Shuffle, hold out a test split, cut the rest into shards and upload them as a new version.

    ``X`` is a dense 2-D array or a CSRMatrix (stored as CSR shards). ``test`` is a separate
    test set (``data prepare --test``): then every row of ``X`` is a training row
    (``test_fraction`` must be 0), and the test split is ``test``'s rows in their order, its
    labels in the classes of ``y``. Every shard and the manifest are written before
    ``current.json`` points at the version; an existing dataset is replaced only with
    ``overwrite``, and its previous version is kept for jobs still running on it (older ones
    are deleted).
    """
    keys.check_name(name, "dataset name")
    check_absent(store, name, overwrite=overwrite)
    y = np.asarray(y)
    if X.ndim != 2 or y.ndim != 1 or len(X) != len(y):
        raise DataError(f"features {X.shape} and labels {y.shape} do not match")
    if X.shape[1] == 0:
        raise DataError(f"dataset {name!r} has no features: each row is only a label (a model needs at least one)")
    if test is not None and test_fraction:
        raise DataError(f"a separate test set and a test fraction of {test_fraction}: hold out one or the other")
    n_test = check_split(len(y), shards, test_fraction)
    distinct = np.unique(y)  # sorted once, for the three uses below
    # The train set's classes, to map the test set's labels by.
    values = class_values(y, distinct) if test is not None else None
    _say_if_regression(name, distinct)
    y, n_classes, label_values = normalize_labels(y, distinct)
    order = np.random.default_rng(seed).permutation(len(y))
    train = order[n_test:]
    X = _stored(X)
    held_X, held_y, held_rows = X, y, order[:n_test]
    if test is not None:
        held_X, held_y = _stored(test[0]), np.asarray(test[1])
        if held_X.ndim != 2 or held_y.ndim != 1 or len(held_X) != len(held_y):
            raise DataError(f"test features {held_X.shape} and labels {held_y.shape} do not match")
        if held_X.shape[1] != X.shape[1] or isinstance(held_X, CSRMatrix) != isinstance(X, CSRMatrix):
            raise DataError(f"the test set's {held_X.shape[1]} features are not the train set's {X.shape[1]}")
        held_y = held_y if values is None else to_classes(held_y, values)
        held_rows = np.arange(len(held_y))
    y = np.ascontiguousarray(y, dtype=np.float32)
    held_y = np.ascontiguousarray(held_y, dtype=np.float32)
    with new_version(store, name) as version:
        return _write_version(
            store, name, version, X, y, train, (held_X, held_y, held_rows),
            shards=shards, n_classes=n_classes, label_values=label_values, sample_shape=sample_shape,
            overwrite=overwrite,
        )  # fmt: skip


def _write_version(
    store: Channel,
    name: str,
    version: str,
    X: Features,
    y: Array,
    train: Array,
    held: tuple[Features, Array, Array],
    *,
    shards: int,
    n_classes: int,
    label_values: list[float] | None,
    sample_shape: list[int] | None,
    overwrite: bool,
) -> Manifest:
    """Write one version's shards, test split and manifest, check they are all there, then point at it."""
    held_X, held_y, held_rows = held
    fmt = "csr" if isinstance(X, CSRMatrix) else "dense"
    pieces = np.array_split(train, shards)
    sizes: list[int] = []
    hashes: list[str] = []
    for index, rows in enumerate(pieces):
        shard = _encode_rows(X, y, rows)
        store.put(keys.dataset_shard(name, version, index), shard)
        sizes.append(len(shard))
        hashes.append(content_hash(shard))
    n_test, test_bytes, test_hash = len(held_rows), 0, ""
    if n_test:
        held_out = _encode_rows(held_X, held_y, held_rows)
        store.put(keys.dataset_test(name, version), held_out)
        test_bytes, test_hash = len(held_out), content_hash(held_out)
    manifest = Manifest(
        name=name,
        n_features=int(X.shape[1]),
        shard_rows=[len(p) for p in pieces],
        test_rows=n_test,
        created=time.time(),
        dataset_version=version,
        shard_bytes=sizes,
        shard_hashes=hashes,
        test_bytes=test_bytes,
        test_hash=test_hash,
        n_classes=n_classes,
        sample_shape=sample_shape,
        format=fmt,
        label_values=label_values,
    )
    put_json(store, keys.dataset_manifest(name, version), asdict(manifest))
    publish(store, manifest, overwrite=overwrite)
    log.info("prepared %s dataset %s version %s: %d shards, %d test rows", fmt, name, version, shards, n_test)
    return manifest


def _stored(X: Features) -> Features:
    """Rows as shards hold them: a checked CSRMatrix, or contiguous float32."""
    if isinstance(X, CSRMatrix):
        X.validate()
        return X
    return np.ascontiguousarray(X, dtype=np.float32)


def check_split(rows: int | None, shards: int, test_fraction: float) -> int:
    """Check a split before any upload (``rows`` None: the parameters alone); returns the test rows."""
    if not 0 <= test_fraction < 1:  # NaN fails this too
        raise DataError(f"test fraction {test_fraction} is outside [0, 1)")
    if shards < 1:
        raise DataError(f"{shards} shards: a dataset needs at least one")
    if rows is None:
        return 0
    n_test = round(rows * test_fraction)
    if rows - n_test < shards:
        raise DataError(f"{rows - n_test} training rows cannot fill {shards} shards")
    return n_test


def _encode_rows(X: Features, y: Array, rows: Array) -> bytes:
    """One shard's bundle: dense ``X`` and ``y``, or the CSR arrays and ``y``."""
    if isinstance(X, CSRMatrix):
        return codec.encode_bundle({**X[rows].to_bundle(), "y": y[rows]})
    return codec.encode_bundle({"X": X[rows], "y": y[rows]})


def _load_bundle(
    store: Channel, manifest: Manifest, key: str, rows: int, size: int, digest: str
) -> tuple[Features, Array]:
    """Download, verify and map one shard; a corrupt, foreign or mismatched one is a DataError naming its key."""
    if manifest.format not in FORMATS:
        raise DataError(
            f"dataset {manifest.name!r} has format {manifest.format!r}; this build reads {', '.join(FORMATS)}"
        )
    try:
        raw = store.get(key)
    except KeyNotFound:
        raise DataError(f"dataset {manifest.name!r} is missing {key}") from None
    if len(raw) != size or content_hash(raw) != digest:
        raise DataError(
            f"{key} is not the shard its manifest describes ({len(raw)} bytes, expected {size}, or another "
            f"hash): dataset {manifest.name!r} version {manifest.dataset_version} is damaged or mixed"
        )
    try:
        bundle = codec.decode_bundle(raw, what=key)
        y = bundle["y"]
        X: Features
        if manifest.format == "csr":
            X = CSRMatrix.from_bundle(bundle, shape=(rows, manifest.n_features), what=key)
        else:
            X = bundle["X"]
    except KeyError as exc:
        raise DataError(f"{key} has no {exc} array") from None
    except CodecError as exc:
        raise DataError(str(exc)) from None
    if isinstance(X, np.ndarray) and (X.dtype != np.float32 or X.shape != (rows, manifest.n_features)):
        raise DataError(f"{key} holds {X.dtype} {X.shape} features, expected float32 ({rows}, {manifest.n_features})")
    if y.dtype != np.float32 or y.shape != (rows,):
        raise DataError(f"{key} has {y.dtype} {y.shape} labels, expected float32 ({rows},)")
    # A tampered shard with NaN would train on, writing NaN to every channel; one pass at load refuses it.
    values = X.data if isinstance(X, CSRMatrix) else X
    if not (np.isfinite(values).all() and np.isfinite(y).all()):
        raise DataError(f"{key} holds NaN or infinite values")
    return X, y


def load_worker_data(store: Channel, manifest: Manifest, rank: int, workers: int) -> tuple[Features, Array]:
    """Download and map the shards of one worker (a CSRMatrix for a csr dataset, else an array)."""
    name, version = manifest.name, manifest.dataset_version
    loaded = [
        _load_bundle(
            store,
            manifest,
            keys.dataset_shard(name, version, i),
            manifest.shard_rows[i],
            manifest.shard_bytes[i],
            manifest.shard_hashes[i],
        )
        for i in shards_of_worker(manifest, rank, workers)
    ]
    if len(loaded) == 1:
        return loaded[0]
    y = np.concatenate([y for _, y in loaded])
    parts = [X for X, _ in loaded]
    if manifest.format == "csr":
        return CSRMatrix.vstack([X for X in parts if isinstance(X, CSRMatrix)]), y
    return np.concatenate([X for X in parts if isinstance(X, np.ndarray)]), y


def load_test(store: Channel, manifest: Manifest) -> tuple[Features, Array] | None:
    """The held-out test split, or None when the dataset has none."""
    if manifest.test_rows == 0:
        return None
    key = keys.dataset_test(manifest.name, manifest.dataset_version)
    return _load_bundle(store, manifest, key, manifest.test_rows, manifest.test_bytes, manifest.test_hash)


# Beside what this module defines, the names of data.manifest and data.versions that a user of
# shards needs with them, so that one import serves.
__all__ = [
    "REGRESSION_HINT_VALUES",
    "Manifest",
    "check_absent",
    "check_split",
    "content_hash",
    "current_version",
    "load_test",
    "load_worker_data",
    "prepare",
    "read_manifest",
    "shards_of_worker",
]
