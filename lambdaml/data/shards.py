"""Binary shards in S3: ``lambdaml data prepare`` writes them, workers map them.

A dataset is a manifest plus one codec bundle per shard and an optional test bundle.
A dense shard holds ``X`` (float32 rows) and ``y``; a CSR shard (``manifest.format ==
"csr"``) holds ``indptr``, ``indices``, ``data``, ``shape`` and ``y``. Workers never parse
text: they download their shard and ``np.frombuffer`` it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import numpy as np

from lambdaml import codec, keys
from lambdaml.channels import Channel
from lambdaml.data.sparse import CSRMatrix, Features
from lambdaml.errors import CodecError, DataError, KeyNotFound, brief
from lambdaml.storage import get_json, put_json

log = logging.getLogger(__name__)
MANIFEST_VERSION = 1
FORMATS = ("dense", "csr")


@dataclass(frozen=True)
class Manifest:
    name: str
    n_features: int
    shard_rows: list[int]
    test_rows: int
    created: float
    version: int = MANIFEST_VERSION
    n_classes: int = 2  # distinct labels (0..n_classes-1 for classification)
    sample_shape: list[int] | None = None  # a row's shape before flattening, e.g. [3, 32, 32]
    format: str = "dense"  # "dense" rows, or "csr" for sparse data

    @property
    def shards(self) -> int:
        return len(self.shard_rows)

    @property
    def train_rows(self) -> int:
        return sum(self.shard_rows)

    def rows_of_worker(self, rank: int, workers: int) -> int:
        return sum(self.shard_rows[i] for i in shards_of_worker(self, rank, workers))


def shards_of_worker(manifest: Manifest, rank: int, workers: int) -> list[int]:
    """Worker ``rank`` reads shards rank, rank+W, ...; the shard count must be a multiple of W."""
    if manifest.shards % workers:
        raise DataError(
            f"dataset {manifest.name!r} has {manifest.shards} shards, which {workers} workers cannot split "
            f"evenly; prepare it with --shards {workers}"
        )
    return list(range(rank, manifest.shards, workers))


def prepare(
    store: Channel,
    name: str,
    X: Features,
    y: np.ndarray,
    *,
    shards: int,
    test_fraction: float = 0.2,
    seed: int = 0,
    sample_shape: list[int] | None = None,
) -> Manifest:
    """Shuffle, hold out a test split, cut the rest into shards and upload them.

    ``X`` is a dense 2-D array or a CSRMatrix (stored as CSR shards). The manifest is
    written last, so a reader that finds it finds every shard.
    """
    keys.check_name(name, "dataset name")
    y = np.asarray(y)
    if X.ndim != 2 or y.ndim != 1 or len(X) != len(y):
        raise DataError(f"features {X.shape} and labels {y.shape} do not match")
    n_test = check_split(len(y), shards, test_fraction)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:n_test], order[n_test:]
    if isinstance(X, CSRMatrix):
        X.validate()
        fmt = "csr"
    else:
        X = np.ascontiguousarray(X, dtype=np.float32)
        fmt = "dense"
    y = np.ascontiguousarray(y, dtype=np.float32)
    pieces = np.array_split(train, shards)
    for index, rows in enumerate(pieces):
        store.put(keys.dataset_shard(name, index), _encode_rows(X, y, rows))
    if n_test:
        store.put(keys.dataset_test(name), _encode_rows(X, y, test))
    manifest = Manifest(
        name=name,
        n_features=int(X.shape[1]),
        shard_rows=[len(p) for p in pieces],
        test_rows=n_test,
        created=time.time(),
        n_classes=_count_classes(y),
        sample_shape=sample_shape,
        format=fmt,
    )
    put_json(store, keys.dataset_manifest(name), asdict(manifest))
    log.info("prepared %s dataset %s: %d shards, %d test rows", fmt, name, shards, n_test)
    return manifest


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


def _encode_rows(X: Features, y: np.ndarray, rows: np.ndarray) -> bytes:
    """One shard's bundle: dense ``X`` and ``y``, or the CSR arrays and ``y``."""
    if isinstance(X, CSRMatrix):
        return codec.encode_bundle({**X[rows].to_bundle(), "y": y[rows]})
    return codec.encode_bundle({"X": X[rows], "y": y[rows]})


def _count_classes(y: np.ndarray) -> int:
    """Classes of integer labels 0..C-1; binary data ({0,1} or {-1,+1}) has 2."""
    labels = np.unique(y)
    if len(labels) <= 2:
        return 2
    return int(labels.max()) + 1 if np.all(labels == np.round(labels)) and labels.min() >= 0 else len(labels)


def read_manifest(store: Channel, name: str) -> Manifest:
    key = keys.dataset_manifest(name)
    try:
        raw = get_json(store, key)
    except KeyNotFound:
        raise DataError(
            f"dataset {name!r} not found: {store.describe()} has no {key} (run 'lambdaml data prepare')"
        ) from None
    except CodecError as exc:
        raise DataError(str(exc)) from None
    if not isinstance(raw, dict):
        raise DataError(f"{key} is not a dataset manifest: it holds a {type(raw).__name__}, not an object")
    try:
        manifest = Manifest(**raw)
    except TypeError as exc:
        raise DataError(f"{key} is not a dataset manifest: {exc}") from None
    if manifest.version != MANIFEST_VERSION:
        raise DataError(f"{key} has manifest version {brief(manifest.version)}; this build reads {MANIFEST_VERSION}")
    problem = _manifest_problem(manifest, name)
    if problem:
        raise DataError(f"{key} is not a valid dataset manifest: {problem}")
    return manifest


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def _manifest_problem(m: Manifest, name: str) -> str | None:
    """What is wrong with a manifest read from storage (a hand-made or tampered one), or None."""
    if m.name != name:
        return f"it names dataset {brief(m.name)}"
    if not _count(m.n_features) or m.n_features < 1:
        return f"n_features is {brief(m.n_features)}, expected a positive integer"
    if not isinstance(m.shard_rows, list) or not m.shard_rows or not all(_count(r) for r in m.shard_rows):
        return f"shard_rows is {brief(m.shard_rows)}, expected a list of row counts"
    empty = [i for i, rows in enumerate(m.shard_rows) if rows == 0]
    if empty:
        return f"shard {empty[0]} is empty (every shard needs at least one row)"
    if not _count(m.test_rows):
        return f"test_rows is {brief(m.test_rows)}, expected a count"
    if not _count(m.n_classes) or m.n_classes < 1:
        return f"n_classes is {brief(m.n_classes)}, expected a positive integer"
    if m.format not in FORMATS:
        return f"format is {brief(m.format)}; this build reads {', '.join(FORMATS)}"
    if m.sample_shape is not None:
        shape = m.sample_shape
        if not isinstance(shape, list) or not shape or not all(_count(d) and d > 0 for d in shape):
            return f"sample_shape is {brief(shape)}, expected a list of positive sizes"
        if int(np.prod(shape, dtype=object)) != m.n_features:
            return f"sample_shape {shape} does not hold n_features={m.n_features} values"
    return None


def _load_bundle(store: Channel, manifest: Manifest, key: str, rows: int) -> tuple[Features, np.ndarray]:
    """Download, verify and map one shard; a corrupt or mismatched one is a DataError naming its key."""
    if manifest.format not in FORMATS:
        raise DataError(
            f"dataset {manifest.name!r} has format {manifest.format!r}; this build reads {', '.join(FORMATS)}"
        )
    try:
        raw = store.get(key)
    except KeyNotFound:
        raise DataError(f"dataset {manifest.name!r} is missing {key}") from None
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


def load_worker_data(store: Channel, manifest: Manifest, rank: int, workers: int) -> tuple[Features, np.ndarray]:
    """Download and map the shards of one worker (a CSRMatrix for a csr dataset, else an array)."""
    loaded = [
        _load_bundle(store, manifest, keys.dataset_shard(manifest.name, i), manifest.shard_rows[i])
        for i in shards_of_worker(manifest, rank, workers)
    ]
    if len(loaded) == 1:
        return loaded[0]
    y = np.concatenate([y for _, y in loaded])
    parts = [X for X, _ in loaded]
    if manifest.format == "csr":
        return CSRMatrix.vstack([X for X in parts if isinstance(X, CSRMatrix)]), y
    return np.concatenate([X for X in parts if isinstance(X, np.ndarray)]), y


def load_test(store: Channel, manifest: Manifest) -> tuple[Features, np.ndarray] | None:
    """The held-out test split, or None when the dataset has none."""
    if manifest.test_rows == 0:
        return None
    return _load_bundle(store, manifest, keys.dataset_test(manifest.name), manifest.test_rows)
