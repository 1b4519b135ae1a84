"""A dataset's versions in storage: which one is current, writing a new one, listing and removing them.

A dataset is a series of immutable versions, and ``current.json`` names the version in use. A
new version is written whole under a lease before the pointer moves, so an interrupted prepare
leaves the previous version intact and current, and a job pins the version it started on. The
previous version is kept for jobs still running on it; older ones are pruned.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.data.manifest import Manifest, parse_manifest
from lambdaml.errors import CodecError, DataError, KeyNotFound, LambdaMLError
from lambdaml.storage import get_json, put_json

log = logging.getLogger(__name__)

#: How long a prepare's lease protects the version it writes: past this it was abandoned (a crash).
LEASE_S = 24 * 3600.0


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


@contextmanager
def new_version(store: Channel, name: str) -> Iterator[str]:
    """A new version's id, leased while it is written: a prune that sees one of its shards sees the lease."""
    version = new_version_id()
    lease = keys.dataset_lease(name, version)
    put_json(store, lease, {"started": time.time()})
    try:
        yield version
    finally:
        store.delete([lease])


def publish(store: Channel, manifest: Manifest, *, overwrite: bool) -> None:
    """Point ``current.json`` at a written version once every object of it is there, then prune old versions.

    Without ``overwrite`` the pointer is created only if no other prepare created it meanwhile.
    """
    name, version = manifest.name, manifest.dataset_version
    _check_whole(store, manifest)
    previous = current_version(store, name)
    pointer = json.dumps({"version": version, "previous": previous}, sort_keys=True).encode()
    if overwrite:
        store.put(keys.dataset_current(name), pointer)
    elif not store.put_new(keys.dataset_current(name), pointer):  # another prepare created it meanwhile
        store.delete(store.list(keys.dataset_version_prefix(name, version)))
        raise DataError(f"dataset {name!r} was created by another prepare meanwhile; use --overwrite to replace it")
    _prune(store, name, keep={version, previous, current_version(store, name)})


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
    return parse_manifest(raw, key, name, version)
