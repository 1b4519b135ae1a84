"""A dataset version's manifest: its shards' rows, sizes and SHA-256, and what its rows hold.

Workers check every shard they load against it, so a shard from another version (or a damaged
one) is refused by name. ``parse_manifest`` is the one place a manifest read from storage is
checked: a hand-made or tampered one is a DataError naming what is wrong.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from lambdaml.errors import DataError, brief

MANIFEST_VERSION = 2
FORMATS = ("dense", "csr")
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


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_HASH_CHARS]


def parse_manifest(raw: object, key: str, name: str, version: str) -> Manifest:
    """The manifest of dataset ``name``'s ``version`` from the JSON read at ``key``, checked whole."""
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
