"""Safe wire format for tensors on channels and in buckets; no pickle anywhere.

A tensor is a 24-byte little-endian header (magic, format version, dtype code, ndim,
payload length, CRC-32), the shape, then the raw payload. Decoding checks every field
and the checksum, so a truncated or corrupted value is rejected with a clear error
instead of silently training on garbage. Payloads start 8-byte aligned, so decoding is a
zero-copy ``np.frombuffer``.

A bundle is several named tensors in one value (a data shard, a model).
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import google_crc32c
import numpy as np

from lambdaml.arrays import Array
from lambdaml.errors import CodecError

MAGIC = b"LMLT"
BUNDLE_MAGIC = b"LMLB"
VERSION = 2  # 2: CRC-32C checksums (hardware, ~8x zlib's CRC-32); 1: zlib's CRC-32, still read
READABLE_VERSIONS = (1, 2)
# magic, version, dtype code, ndim, reserved, payload bytes, crc32, reserved
_HEADER = struct.Struct("<4sBBBBQII")
# A container's (bundle's or packed value's): magic, version, entry count, crc32 of its table
_CONTAINER_HEADER = struct.Struct("<4sBxxxII")
_ENTRY = struct.Struct("<HxxxxxxQ")  # name length, tensor length
MAX_NDIM = 8
_MAX_BYTES = 2**63 - 1  # numpy's limit on an array's size in bytes

_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype("<f4"),
    2: np.dtype("<f8"),
    3: np.dtype("<f2"),
    4: np.dtype("i1"),
    5: np.dtype("u1"),
    6: np.dtype("<i4"),
    7: np.dtype("<i8"),
    8: np.dtype("<u4"),
    9: np.dtype("<u8"),
    10: np.dtype("?"),
}
_CODES = {dtype: code for code, dtype in _DTYPES.items()}


log = logging.getLogger(__name__)

if google_crc32c.implementation != "c":  # correct, but each checksum then runs in pure Python
    log.warning("google-crc32c has no C extension here: checksums will be very slow")


def checksum(*parts: bytes | memoryview, version: int = VERSION) -> int:
    """The checksum of ``parts`` joined (without joining them), as format ``version`` computes it."""
    crc = 0
    for part in parts:
        if version == 1:
            crc = zlib.crc32(part, crc)
        else:  # the extension takes bytes or arrays, not memoryviews: view them as an array, no copy
            crc = google_crc32c.extend(crc, part if isinstance(part, bytes) else np.frombuffer(part, np.uint8))
    return crc


def _pad8(n: int) -> int:
    return (-n) % 8


def encode(array: Array) -> bytes:
    """Encode one array (any supported dtype, at most 8 dimensions)."""
    return b"".join(encode_buffers(array))


def encode_buffers(array: Array) -> tuple[bytes, memoryview]:
    """``encode`` as its header and a view of the array's own memory, uncopied (for a channel
    that sends buffers as they are). The array must not change until the value is sent."""
    arr = np.asarray(array)
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    code = _CODES.get(np.dtype(dtype))
    if code is None:
        raise CodecError(f"dtype {arr.dtype} cannot be put on the wire")
    if arr.ndim > MAX_NDIM:
        raise CodecError(f"{arr.ndim} dimensions is more than the {MAX_NDIM} the format allows")
    contiguous = np.ascontiguousarray(arr, dtype=dtype)
    payload = contiguous.reshape(-1).view(np.uint8).data if contiguous.size else memoryview(b"")
    shape = struct.pack(f"<{arr.ndim}Q", *arr.shape)
    head = _HEADER.pack(MAGIC, VERSION, code, arr.ndim, 0, len(payload), 0, 0)
    crc = checksum(head, shape, payload)
    head = _HEADER.pack(MAGIC, VERSION, code, arr.ndim, 0, len(payload), crc, 0)
    return head + shape, payload


def encoded_bytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """The length of ``encode`` of an array of this shape and dtype (without encoding it)."""
    return _HEADER.size + 8 * len(shape) + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def decode(
    data: bytes | bytearray | memoryview,
    *,
    dtype: np.dtype[Any] | type | str | None = None,
    shape: tuple[int, ...] | None = None,
    what: str = "value",
) -> Array:
    """Decode and verify one array; ``dtype``/``shape`` reject a value of the wrong kind.

    The returned array is read-only and shares memory with ``data``.
    """
    view = memoryview(data).cast("B")
    fields = _header(view, what)
    shape_end = _HEADER.size + 8 * fields[3]
    if len(view) != shape_end + fields[5]:
        raise CodecError(f"{what} is truncated or padded: {len(view)} bytes, header says {shape_end + fields[5]}")
    array = _checked(fields, view[:shape_end], view[shape_end:], dtype, shape, what)
    array.flags.writeable = False  # shares memory with the value it came from
    return array


def check_placed(head: bytes | memoryview, out: Array, what: str = "value") -> None:
    """Verify a value whose payload was read straight into ``out`` (a contiguous array of the
    dtype and shape it must have): ``head`` is the rest of it, its header and shape."""
    view = memoryview(head).cast("B")
    fields = _header(view, what)
    if len(view) != _HEADER.size + 8 * fields[3] or out.nbytes != fields[5]:
        size = len(view) + out.nbytes
        raise CodecError(f"{what} is truncated or padded: {size} bytes, header says {len(view)} + {fields[5]}")
    _checked(fields, view, out.data.cast("B"), out.dtype, out.shape, what)


def _header(view: memoryview, what: str) -> tuple[Any, ...]:
    """The header's fields (magic, version, code, ndim, reserved, length, crc, reserved), checked alone."""
    if len(view) < _HEADER.size:
        raise CodecError(f"{what} is truncated: {len(view)} bytes is shorter than a tensor header")
    fields = _HEADER.unpack_from(view)
    magic, version, code, ndim, reserved, _, _, reserved2 = fields
    if magic != MAGIC:
        raise CodecError(f"{what} is not a LambdaML tensor (bad magic {bytes(magic)!r})")
    if version not in READABLE_VERSIONS:
        raise CodecError(f"{what} has tensor format version {version}; this build reads {_readable()}")
    if reserved or reserved2:
        raise CodecError(f"{what} is corrupt: reserved header bytes are set")
    if code not in _DTYPES:
        raise CodecError(f"{what} has unknown dtype code {code}")
    if ndim > MAX_NDIM:
        raise CodecError(f"{what} claims {ndim} dimensions")
    return fields


def _checked(
    fields: tuple[Any, ...],
    head: memoryview,
    payload: memoryview,
    dtype: np.dtype[Any] | type | str | None,
    shape: tuple[int, ...] | None,
    what: str,
) -> Array:
    """The payload as the array the header and shape (``head``) describe, once the shape, the
    checksum and the expected kind check out."""
    magic, version, code, ndim, _, length, crc, _ = fields
    dims = struct.unpack_from(f"<{ndim}Q", head, _HEADER.size)
    item = _DTYPES[code]
    count = extent = 1
    for dim in dims:
        count *= dim
        extent *= max(dim, 1)  # numpy refuses a shape whose non-zero dimensions overflow, even with a 0 among them
    if extent * item.itemsize > _MAX_BYTES:
        raise CodecError(f"{what} claims an impossible shape {dims}")
    if count * item.itemsize != length:
        raise CodecError(f"{what} shape {dims} does not match its {length} payload bytes")
    zeroed = _HEADER.pack(magic, version, code, ndim, 0, length, 0, 0)
    if checksum(zeroed, head[_HEADER.size :], payload, version=version) != crc:
        raise CodecError(f"{what} is corrupt: checksum mismatch")
    if dtype is not None and np.dtype(dtype) != item:
        raise CodecError(f"{what} has dtype {item}, expected {np.dtype(dtype)}")
    if shape is not None and tuple(shape) != tuple(dims):
        raise CodecError(f"{what} has shape {tuple(dims)}, expected {tuple(shape)}")
    return np.frombuffer(payload, dtype=item, count=count).reshape(dims)


def encode_bundle(arrays: Mapping[str, Array]) -> bytes:
    """Encode named arrays into one value (a data shard, a model's parameters)."""
    parts: list[bytes] = []
    table: list[bytes] = []
    for name, array in arrays.items():
        raw_name = name.encode("utf-8")
        tensor = encode(array)
        entry = _ENTRY.pack(len(raw_name), len(tensor)) + raw_name
        table.append(entry)
        parts.append(entry + b"\0" * _pad8(len(raw_name)))
        parts.append(tensor + b"\0" * _pad8(len(tensor)))
    return _CONTAINER_HEADER.pack(BUNDLE_MAGIC, VERSION, len(arrays), checksum(*table)) + b"".join(parts)


def bundle_bytes(arrays: Mapping[str, Array]) -> int:
    """The length of ``encode_bundle(arrays)``, without encoding them."""
    total = _CONTAINER_HEADER.size
    for name, array in arrays.items():
        raw_name = len(name.encode("utf-8"))
        tensor = encoded_bytes(np.shape(array), np.asarray(array).dtype)
        total += _ENTRY.size + raw_name + _pad8(raw_name) + tensor + _pad8(tensor)
    return total


def _container_header(view: memoryview, magic: bytes, kind: str, what: str) -> tuple[int, int, int]:
    """A bundle's or packed value's format version, entry count and table checksum, once its magic
    and version check out."""
    if len(view) < _CONTAINER_HEADER.size:
        raise CodecError(f"{what} is truncated: {len(view)} bytes")
    found, version, count, table_crc = _CONTAINER_HEADER.unpack_from(view)
    if found != magic:
        raise CodecError(f"{what} is not a LambdaML {kind} (bad magic {bytes(found)!r})")
    if version not in READABLE_VERSIONS:
        raise CodecError(f"{what} has {kind} format version {version}; this build reads {_readable()}")
    return version, count, table_crc


def _readable() -> str:
    return " and ".join(map(str, READABLE_VERSIONS))


def decode_bundle(data: bytes | bytearray | memoryview, *, what: str = "bundle") -> dict[str, Array]:
    """Decode and verify every array of a bundle (zero-copy)."""
    view = memoryview(data).cast("B")
    version, count, table_crc = _container_header(view, BUNDLE_MAGIC, "bundle", what)
    offset = _CONTAINER_HEADER.size
    out: dict[str, Array] = {}
    table: list[memoryview] = []
    entries: list[tuple[str, memoryview]] = []
    for _ in range(count):
        if offset + _ENTRY.size > len(view):
            raise CodecError(f"{what} is truncated in its entry table")
        name_len, tensor_len = _ENTRY.unpack_from(view, offset)
        offset += _ENTRY.size
        name_end = offset + name_len
        tensor_start = name_end + _pad8(name_len)
        if tensor_start + tensor_len + _pad8(tensor_len) > len(view):
            raise CodecError(f"{what} is truncated")
        table.append(view[offset - _ENTRY.size : name_end])
        try:
            name = bytes(view[offset:name_end]).decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"{what} has an entry name that is not UTF-8") from None
        entries.append((name, view[tensor_start : tensor_start + tensor_len]))
        offset = tensor_start + tensor_len + _pad8(tensor_len)
    if checksum(*table, version=version) != table_crc:
        raise CodecError(f"{what} is corrupt: entry table checksum mismatch")
    for name, tensor in entries:
        if name in out:
            raise CodecError(f"{what} has two entries named {name!r}")
        out[name] = decode(tensor, what=f"{what} entry {name!r}")
    if offset != len(view):
        raise CodecError(f"{what} has {len(view) - offset} unexpected trailing bytes")
    return out


# A packed value is several byte strings in one value, each readable on its own with a ranged
# read: a fixed-size index (its size depends only on the slot count, so a reader fetches it
# without knowing the values), then the values, each 8-byte aligned. The values carry their own
# checks (a sealed piece is bound to its own key); the index carries a CRC of itself.
PACKED_MAGIC = b"LMLP"
_SLOT = struct.Struct("<QQ")  # offset, length


def packed_index_bytes(slots: int) -> int:
    """Size of a packed value's index: where its first value starts."""
    return _CONTAINER_HEADER.size + slots * _SLOT.size


def packed_slots(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Where values of these lengths lie in a packed value: ``(start, stop)`` of each, in order."""
    slots: list[tuple[int, int]] = []
    offset = packed_index_bytes(len(lengths))
    for length in lengths:
        slots.append((offset, offset + length))
        offset += length + _pad8(length)
    return slots


def encode_packed(values: Sequence[bytes]) -> bytes:
    """Pack byte strings into one value; ``packed_slots`` of their lengths says where each lies."""
    slots = packed_slots([len(v) for v in values])
    table = b"".join(_SLOT.pack(start, stop - start) for start, stop in slots)
    parts = [_CONTAINER_HEADER.pack(PACKED_MAGIC, VERSION, len(values), checksum(table)), table]
    for value in values:
        parts += (value, b"\0" * _pad8(len(value)))
    return b"".join(parts)


def decode_packed_index(
    data: bytes | bytearray | memoryview, slots: int, *, what: str = "packed value"
) -> list[tuple[int, int]]:
    """The ``(start, stop)`` of every value from a packed value's first ``packed_index_bytes(slots)`` bytes."""
    view = memoryview(data).cast("B")
    if len(view) != packed_index_bytes(slots):
        raise CodecError(f"{what} index is truncated: {len(view)} bytes, expected {packed_index_bytes(slots)}")
    version, count, crc = _container_header(view, PACKED_MAGIC, "packed value", what)
    if count != slots:
        raise CodecError(f"{what} holds {count} values, expected {slots}")
    table = view[_CONTAINER_HEADER.size :]
    if checksum(table, version=version) != crc:
        raise CodecError(f"{what} is corrupt: index checksum mismatch")
    out = []
    for i in range(slots):
        start, length = _SLOT.unpack_from(table, i * _SLOT.size)
        out.append((start, start + length))
    return out
