"""Values over a backend's item limit: split into parts and a manifest, and joined again.

The parts go first and the manifest last, so a reader that finds the key finds every part.
Every part starts with its write's random id, which the manifest names: parts of two writes of
a key are never joined, and no checksum pass over the bytes is needed (the value inside carries
its own: the codec's CRC-32C and the seal).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from lambdaml import keys as K
from lambdaml.buffers import Buffers, Value, cut, size
from lambdaml.errors import ChannelError, TransientChannelError

_MAGIC = b"\x00LMLCHUNK"
_MANIFEST = struct.Struct("<9sBIQ8s")  # magic, version, parts, total bytes, write id
_VERSION = 2
WRITE_ID = 8


@dataclass(frozen=True)
class Manifest:
    """What a chunked value's key holds: how many parts, how many bytes in all, and its write's id."""

    key: str
    parts: int
    total: int
    write_id: bytes

    @property
    def part_keys(self) -> list[str]:
        return [K.chunk_part(self.key, i) for i in range(self.parts)]


def part_spans(total: int, limit: int) -> list[tuple[int, int]]:
    """The bytes of a ``total``-byte value each part holds (after its write id), at the item ``limit``."""
    step = limit - WRITE_ID
    return [(start, min(start + step, total)) for start in range(0, total, step)]


def split_value(key: str, data: Value, limit: int) -> tuple[list[tuple[str, Buffers]], tuple[str, bytes]]:
    """The parts (each at most ``limit`` bytes: the write id and views of ``data``, nothing copied)
    and the manifest of ``data`` at ``key``."""
    write_id, total = os.urandom(WRITE_ID), size(data)
    spans = part_spans(total, limit)
    parts = [(K.chunk_part(key, n), (write_id, *cut(data, start, stop))) for n, (start, stop) in enumerate(spans)]
    return parts, (key, _MANIFEST.pack(_MAGIC, _VERSION, len(parts), total, write_id))


def manifest_of(key: str, raw: bytes, kind: str) -> Manifest | None:
    """The manifest ``raw`` is, or None where it is a whole value."""
    if not raw.startswith(_MAGIC) or len(raw) != _MANIFEST.size:
        return None
    _, version, parts, total, write_id = _MANIFEST.unpack(raw)
    if version != _VERSION:
        raise ChannelError(f"{kind}: value {key!r} was chunked by another version of LambdaML")
    return Manifest(key, parts, total, write_id)


def join_parts(manifest: Manifest, parts: Mapping[str, bytes], kind: str) -> bytes:
    """The value the manifest's parts make; refused if one is missing or of another write."""
    check_parts(manifest, parts, sum(len(p) - WRITE_ID for p in parts.values()), kind)
    return b"".join(memoryview(parts[k])[WRITE_ID:] for k in manifest.part_keys)


def check_parts(manifest: Manifest, heads: Mapping[str, bytes], data_bytes: int, kind: str) -> None:
    """Refuse a value reassembled from the manifest's parts if one is missing, one is of another
    write (``heads``: each part found, or at least its first ``WRITE_ID`` bytes), or the parts'
    ``data_bytes`` are not the value's length."""
    key = manifest.key
    if len(heads) != manifest.parts:
        missing = manifest.parts - len(heads)
        raise ChannelError(f"{kind}: value {key!r} is missing {missing} of {manifest.parts} parts")
    if data_bytes != manifest.total or not all(heads[k][:WRITE_ID] == manifest.write_id for k in manifest.part_keys):
        raise reassembled_wrong(manifest, kind)


def reassembled_wrong(manifest: Manifest, kind: str) -> TransientChannelError:
    """The error of parts that do not make the manifest's value (a write replaced them mid-read)."""
    return TransientChannelError(f"{kind}: value {manifest.key!r} was reassembled wrong (changed while read?)")
