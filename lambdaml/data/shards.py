"""Binary shards in S3: ``lambdaml data prepare`` writes them, workers map them.

A dataset is a series of immutable versions; each is a manifest plus one codec bundle per
shard and an optional test bundle, and ``current.json`` names the version in use. A new
version is written whole before the pointer moves, so an interrupted prepare leaves the
previous version intact and current, and a job pins the version it started on. The
manifest records every shard's size and SHA-256, which workers check on load: a shard
from another version (or a damaged one) is refused by name.

A dense shard holds ``X`` (float32 rows) and ``y``; a CSR shard (``manifest.format ==
"csr"``) holds ``indptr``, ``indices``, ``data``, ``shape`` and ``y``. Workers never parse
text: they download their shard and ``np.frombuffer`` it. Class labels are stored as
0..C-1 (``label_values`` keeps what the file called them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import numpy as np

from lambdaml import codec, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.data.sparse import CSRMatrix, Features
from lambdaml.errors import CodecError, DataError, KeyNotFound, LambdaMLError, brief
from lambdaml.storage import get_json, put_json

log = logging.getLogger(__name__)
MANIFEST_VERSION = 2
FORMATS = ("dense", "csr")
#: Most distinct integer labels read as classes; more (or fractional ones) are not a classification.
MAX_CLASSES = 65_536
_HASH_CHARS = 32  # 128 bits of SHA-256, in hex


@dataclass(frozen=True)
class Manifest:
    name: str
    n_features: int
    shard_rows: list[int]
    test_rows: int
    created: float
    dataset_version: str
    shard_bytes: list[int]
    shard_hashes: list[str]
    test_bytes: int = 0
    test_hash: str = ""
    version: int = MANIFEST_VERSION
    n_classes: int = 2  # distinct labels (0..n_classes-1 for classification)
    sample_shape: list[int] | None = None  # a row's shape before flattening, e.g. [3, 32, 32]
    format: str = "dense"  # "dense" rows, or "csr" for sparse data
    label_values: list[float] | None = field(default=None)  # the file's label of class i, where it differs from i

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


def new_version_id() -> str:
    """A dataset version's name: when it was prepared, and a random part for concurrent prepares."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def current_version(store: Channel, name: str) -> str | None:
    """The version ``current.json`` names, or None when the dataset does not exist."""
    try:
        pointer = get_json(store, keys.dataset_current(name))
    except KeyNotFound:
        return None
    except CodecError as exc:
        raise DataError(str(exc)) from None
    version = pointer.get("version") if isinstance(pointer, dict) else None
    if not isinstance(version, str):
        raise DataError(f"{keys.dataset_current(name)} does not name a version")
    return keys.check_name(version, "dataset version")


def datasets(store: Channel) -> list[dict[str, object]]:
    """Every dataset in the bucket: its versions and, of the current one, rows, shards and bytes.

    One paginated listing of ``datasets/``; a dataset whose pointer or manifest does not read
    is still listed (its figures None), so ``data rm`` can be pointed at it.
    """
    found: dict[str, set[str]] = {}
    for key in store.list(keys.DATASETS_PREFIX):
        name = keys.dataset_of(key)
        if name is None:
            continue
        versions = found.setdefault(name, set())
        rest = key.removeprefix(keys.dataset_versions_prefix(name))
        if rest != key and "/" in rest:
            versions.add(rest.split("/", 1)[0])
    listed: list[dict[str, object]] = []
    for name, versions in sorted(found.items()):
        entry: dict[str, object] = dict.fromkeys(("version", "train_rows", "test_rows", "shards", "bytes"))
        entry.update(name=name, versions=len(versions))
        try:
            manifest = read_manifest(store, name)
        except LambdaMLError as exc:
            log.warning("dataset %s: %s", name, exc)
        else:
            entry.update(
                version=manifest.dataset_version,
                train_rows=manifest.train_rows,
                test_rows=manifest.test_rows,
                shards=manifest.shards,
                bytes=sum(manifest.shard_bytes) + manifest.test_bytes,
            )
        listed.append(entry)
    return listed


def remove(store: Channel, name: str) -> int:
    """Delete every version of a dataset and its pointer; return how many keys went.

    The pointer goes first, so a job started meanwhile is refused as for a missing dataset
    rather than reading a half-deleted version. Jobs still running on it lose their shards.
    """
    prefix = keys.dataset_prefix(name)
    present = store.list(prefix)
    if not present:
        known = sorted({n for n in map(keys.dataset_of, store.list(keys.DATASETS_PREFIX)) if n})
        raise DataError(f"no dataset {name!r} in {store.describe()}; datasets: {', '.join(known) or 'none'}")
    store.delete([keys.dataset_current(name)])
    return store.clear(prefix) + (keys.dataset_current(name) in present)


def _legacy(store: Channel, name: str) -> bool:
    return bool(store.get_many([keys.legacy_dataset_manifest(name)]))


def check_absent(store: Channel, name: str, *, overwrite: bool) -> None:
    """Refuse to prepare over an existing dataset unless asked (before any long load or upload)."""
    if overwrite:
        return
    if current_version(store, name) is not None or _legacy(store, name):
        raise DataError(
            f"dataset {name!r} already exists in {store.describe()}; use --overwrite to replace it "
            "(jobs running on it keep their version), or choose another name"
        )


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
    version = new_version_id()
    lease = keys.dataset_lease(name, version)
    put_json(store, lease, {"started": time.time()})  # before any shard: a prune that sees one sees this
    try:
        return _write_version(
            store, name, version, X, y, train, (held_X, held_y, held_rows),
            shards=shards, n_classes=n_classes, label_values=label_values, sample_shape=sample_shape,
            overwrite=overwrite,
        )  # fmt: skip
    finally:
        store.delete([lease])


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
    _check_whole(store, manifest)
    previous = current_version(store, name)
    pointer = json.dumps({"version": version, "previous": previous}, sort_keys=True).encode()
    if overwrite:
        store.put(keys.dataset_current(name), pointer)
    elif not store.put_new(keys.dataset_current(name), pointer):  # another prepare created it meanwhile
        store.delete(store.list(keys.dataset_version_prefix(name, version)))
        raise DataError(f"dataset {name!r} was created by another prepare meanwhile; use --overwrite to replace it")
    _prune(store, name, keep={version, previous, current_version(store, name)})
    log.info("prepared %s dataset %s version %s: %d shards, %d test rows", fmt, name, version, shards, n_test)
    return manifest


def _stored(X: Features) -> Features:
    """Rows as shards hold them: a checked CSRMatrix, or contiguous float32."""
    if isinstance(X, CSRMatrix):
        X.validate()
        return X
    return np.ascontiguousarray(X, dtype=np.float32)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_HASH_CHARS]


#: How long a prepare's lease protects the version it writes: past this it was abandoned (a crash).
LEASE_S = 24 * 3600.0


def _check_whole(store: Channel, manifest: Manifest) -> None:
    """Every shard, the test split and the manifest of a version are in storage (before the pointer moves)."""
    name, version = manifest.name, manifest.dataset_version
    present = set(store.list(keys.dataset_version_prefix(name, version)))
    wanted = [keys.dataset_shard(name, version, i) for i in range(manifest.shards)]
    wanted += [keys.dataset_manifest(name, version)] + (
        [keys.dataset_test(name, version)] if manifest.test_rows else []
    )
    missing = [key for key in wanted if key not in present]
    if missing:
        raise DataError(
            f"dataset {name!r} version {version} lost {len(missing)} of its objects while it was written "
            f"(first: {missing[0]}); the current version is unchanged: prepare it again"
        )


def _leased(store: Channel, name: str, versions: set[str], now: float) -> set[str]:
    """The versions whose prepare still holds its lease (is writing them)."""
    held = set()
    for version in versions:
        try:
            started = get_json(store, keys.dataset_lease(name, version)).get("started")
        except (KeyNotFound, CodecError, AttributeError):
            continue
        if isinstance(started, int | float) and now - started < LEASE_S:
            held.add(version)
    return held


def _prune(store: Channel, name: str, keep: set[str | None]) -> None:
    """Delete every version but ``keep`` (abandoned prepares, what is two versions old) and the old layout.

    A version another prepare is still writing holds a lease, and is left alone: two concurrent
    ``--overwrite`` prepares once deleted each other's half-written shards.
    """
    prefix, versions = keys.dataset_prefix(name), keys.dataset_prefix(name) + "v/"
    listed = store.list(prefix)
    version_of = {key: key[len(versions) :].split("/", 1)[0] for key in listed if key.startswith(versions)}
    leased = _leased(
        store, name, {v for key, v in version_of.items() if key == keys.dataset_lease(name, v)}, time.time()
    )

    def kept(key: str) -> bool:
        return key == keys.dataset_current(name) or version_of.get(key) in keep | leased

    stale = [key for key in listed if not kept(key)]
    if stale:
        store.delete(stale)


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


def read_manifest(store: Channel, name: str, version: str | None = None) -> Manifest:
    """The manifest of ``version`` (a job's pinned one), or of the current version."""
    pinned = version is not None
    version = version if version is not None else current_version(store, name)
    if version is None:
        if _legacy(store, name):
            raise DataError(
                f"dataset {name!r} was prepared by an older LambdaML (no versions or shard hashes); "
                "prepare it again with --overwrite"
            )
        raise DataError(
            f"dataset {name!r} not found: {store.describe()} has no {keys.dataset_current(name)} "
            "(run 'lambdaml data prepare')"
        )
    key = keys.dataset_manifest(name, version)
    try:
        raw = get_json(store, key)
    except KeyNotFound:
        if pinned:
            raise DataError(
                f"dataset {name!r} version {version} is gone (replaced twice since the job started); "
                "start a new job on the current version"
            ) from None
        raise DataError(f"dataset {name!r} names version {version}, which has no manifest ({key})") from None
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
    problem = _manifest_problem(manifest, name, version)
    if problem:
        raise DataError(f"{key} is not a valid dataset manifest: {problem}")
    return manifest


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def _manifest_problem(m: Manifest, name: str, version: str) -> str | None:
    """What is wrong with a manifest read from storage (a hand-made or tampered one), or None."""
    if m.name != name:
        return f"it names dataset {brief(m.name)}"
    if m.dataset_version != version:
        return f"it names version {brief(m.dataset_version)}"
    if not _count(m.n_features) or m.n_features < 1:
        return f"n_features is {brief(m.n_features)}, expected a positive integer"
    if not isinstance(m.shard_rows, list) or not m.shard_rows or not all(_count(r) for r in m.shard_rows):
        return f"shard_rows is {brief(m.shard_rows)}, expected a list of row counts"
    empty = [i for i, rows in enumerate(m.shard_rows) if rows == 0]
    if empty:
        return f"shard {empty[0]} is empty (every shard needs at least one row)"
    if not _count(m.test_rows):
        return f"test_rows is {brief(m.test_rows)}, expected a count"
    sizes, hashes = m.shard_bytes, m.shard_hashes
    if not isinstance(sizes, list) or len(sizes) != len(m.shard_rows) or not all(_count(b) for b in sizes):
        return f"shard_bytes is {brief(sizes)}, expected one size per shard"
    if not isinstance(hashes, list) or len(hashes) != len(m.shard_rows) or not all(_is_hash(h) for h in hashes):
        return f"shard_hashes is {brief(hashes)}, expected one SHA-256 per shard"
    if not _count(m.test_bytes) or (m.test_rows and not _is_hash(m.test_hash)):
        return "the test split has no size or hash"
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


def _is_hash(value: object) -> bool:
    return isinstance(value, str) and len(value) == _HASH_CHARS and all(c in "0123456789abcdef" for c in value)


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
