"""The tensor wire format: exact round trips, zero-copy decode, and loud rejection of bad bytes."""

from __future__ import annotations

import pickle
import struct
import zlib

import numpy as np
import pytest

from lambdaml import codec
from lambdaml.errors import CodecError

DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "uint32", "uint64", "bool"]
HEADER = codec._HEADER.size  # 24 bytes: magic, version, dtype code, ndim, reserved, length, crc, reserved


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Deterministic values that use the dtype's range (negative, fractional, large where allowed)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return (rng.normal(size=shape) * 1000).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def rebuild(
    *,
    magic: bytes = codec.MAGIC,
    version: int = codec.VERSION,
    code: int = 1,
    shape: tuple[int, ...] = (2,),
    payload: bytes = b"\0" * 8,
    length: int | None = None,
) -> bytes:
    """A tensor value with a *valid* checksum over arbitrary header fields, to reach each check."""
    length = len(payload) if length is None else length
    dims = struct.pack(f"<{len(shape)}Q", *shape)
    head = codec._HEADER.pack(magic, version, code, len(shape), 0, length, 0, 0)
    crc = codec.checksum(head, dims, payload, version=1 if version == 1 else codec.VERSION)
    return codec._HEADER.pack(magic, version, code, len(shape), 0, length, crc, 0) + dims + payload


def reject(data: bytes | bytearray, *words: str, **kwargs: object) -> str:
    with pytest.raises(CodecError) as info:
        codec.decode(data, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


# --- round trips ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3, 4)], ids=["scalar", "empty", "1d", "3d"])
def test_round_trip_every_dtype_and_shape(dtype: str, shape: tuple[int, ...]) -> None:
    original = sample(dtype, shape)
    decoded = codec.decode(codec.encode(original))
    assert decoded.dtype == np.dtype(dtype)
    assert decoded.shape == shape
    np.testing.assert_array_equal(decoded, original)


def test_round_trip_keeps_nan_inf_and_negative_zero_bit_exact() -> None:
    original = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, np.finfo(np.float32).max], dtype=np.float32)
    decoded = codec.decode(codec.encode(original))
    assert decoded.tobytes() == original.tobytes()


def test_non_contiguous_input_round_trips() -> None:
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    strided = base[::2, 1::3]
    transposed = base.T
    assert not strided.flags.c_contiguous and not transposed.flags.c_contiguous
    for view in (strided, transposed):
        decoded = codec.decode(codec.encode(view))
        assert decoded.shape == view.shape
        np.testing.assert_array_equal(decoded, view)


@pytest.mark.parametrize("dtype", [">f4", ">f8", ">i4", ">i8", ">u4", ">u8", ">f2"])
def test_big_endian_input_decodes_to_same_values_little_endian(dtype: str) -> None:
    native = sample(np.dtype(dtype).newbyteorder("=").name, (3, 2), seed=1)
    big = native.astype(dtype)
    assert big.dtype.byteorder == ">"
    decoded = codec.decode(codec.encode(big))
    assert decoded.dtype == np.dtype(dtype).newbyteorder("<")
    np.testing.assert_array_equal(decoded, native)
    # the wire is identical to encoding the little-endian array: one canonical form
    assert codec.encode(big) == codec.encode(native)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    original = sample("int32", (4, 4))
    wire = codec.encode(original)
    for data in (bytearray(wire), memoryview(wire)):
        np.testing.assert_array_equal(codec.decode(data), original)


def test_decode_is_zero_copy_and_read_only() -> None:
    wire = codec.encode(np.arange(16, dtype=np.float32))
    decoded = codec.decode(wire)
    assert not decoded.flags.writeable
    assert np.shares_memory(decoded, np.frombuffer(wire, dtype=np.uint8))
    with pytest.raises(ValueError):
        decoded[0] = 1.0


def test_decode_of_bytearray_shares_memory() -> None:
    buf = bytearray(codec.encode(np.arange(4, dtype=np.int64)))
    decoded = codec.decode(buf)
    buf[-8:] = (99).to_bytes(8, "little")  # after the checksum was verified
    assert decoded[-1] == 99


def test_decode_of_bytearray_is_read_only_too() -> None:
    decoded = codec.decode(bytearray(codec.encode(np.arange(4, dtype=np.int64))))
    assert not decoded.flags.writeable


def test_payload_is_8_byte_aligned_for_every_ndim() -> None:
    for ndim in range(codec.MAX_NDIM + 1):
        wire = codec.encode(np.zeros((1,) * ndim, dtype=np.float64))
        assert len(wire) == HEADER + 8 * ndim + 8
        decoded = codec.decode(wire)
        assert decoded.flags.aligned and decoded.ctypes.data % 8 == 0


# --- rejection on decode ----------------------------------------------------------


def test_every_truncation_of_a_small_value_is_rejected() -> None:
    wire = codec.encode(np.arange(5, dtype=np.float32))
    for n in range(len(wire)):
        message = reject(wire[:n])
        assert "truncated" in message, (n, message)


def test_header_only_is_rejected_as_truncated() -> None:
    wire = codec.encode(np.arange(5, dtype=np.float32))
    reject(wire[:HEADER], "truncated")
    reject(wire[: HEADER + 8], "truncated")  # header and shape, no payload


def test_trailing_bytes_are_rejected() -> None:
    reject(codec.encode(np.arange(3, dtype=np.int8)) + b"\0", "padded")


def test_one_flipped_byte_anywhere_in_shape_or_payload_is_rejected() -> None:
    wire = codec.encode(np.arange(6, dtype=np.float32).reshape(2, 3))
    for i in range(HEADER, len(wire)):
        corrupt = bytearray(wire)
        corrupt[i] ^= 0x01
        with pytest.raises(CodecError):
            codec.decode(bytes(corrupt))


def test_flipped_payload_byte_is_reported_as_checksum_mismatch() -> None:
    wire = codec.encode(np.arange(6, dtype=np.float32))
    for i in range(HEADER + 8, len(wire)):
        corrupt = bytearray(wire)
        corrupt[i] ^= 0x80
        reject(bytes(corrupt), "corrupt", "checksum")


def test_flipped_checksum_or_length_field_is_rejected() -> None:
    wire = codec.encode(np.arange(6, dtype=np.float32))
    for i in (8, 16, 19):  # low byte of the payload length, first and last byte of the crc
        corrupt = bytearray(wire)
        corrupt[i] ^= 0x01
        with pytest.raises(CodecError):
            codec.decode(bytes(corrupt))


def test_bad_magic() -> None:
    wire = bytearray(codec.encode(np.zeros(2, dtype=np.float32)))
    wire[:4] = b"NOPE"
    reject(bytes(wire), "magic", "NOPE")


def test_unknown_version() -> None:
    reject(rebuild(version=3), "version 3; this build reads 1 and 2")


def test_a_value_of_the_previous_format_still_decodes() -> None:
    """Datasets, models and checkpoints stored by a build that wrote version 1 (zlib's CRC-32) stay readable."""
    payload = np.arange(4, dtype="<f4").tobytes()
    old = rebuild(version=1, shape=(4,), payload=payload)
    np.testing.assert_array_equal(codec.decode(old), np.arange(4, dtype="<f4"))
    # The same bytes under the current version's header carry the wrong kind of checksum.
    crc_v1 = struct.unpack_from("<I", old, 16)[0]
    relabelled = old[:4] + bytes([codec.VERSION]) + old[5:]
    assert crc_v1 != codec.checksum(relabelled[:16] + b"\0" * 8, relabelled[HEADER:])
    reject(relabelled, "checksum mismatch")
    # zlib's CRC-32 and CRC-32C differ on the same bytes: the version says which one was used.
    assert codec.checksum(b"abc", version=1) == zlib.crc32(b"abc") != codec.checksum(b"abc")


def test_unknown_dtype_code() -> None:
    reject(rebuild(code=99), "unknown dtype code 99")
    reject(rebuild(code=0), "unknown dtype code 0")


def test_too_many_dimensions_in_header() -> None:
    reject(rebuild(shape=(1,) * 9, payload=b"\0" * 4), "9 dimensions")


def test_payload_length_not_matching_shape() -> None:
    # a consistent, correctly checksummed value whose shape needs 12 bytes but carries 8
    message = reject(rebuild(code=1, shape=(3,), payload=b"\0" * 8), "shape")
    assert "(3,)" in message and "8" in message


def test_wrong_expected_dtype_says_expected_and_got() -> None:
    wire = codec.encode(np.zeros(3, dtype=np.float64))
    message = reject(wire, "expected float32", dtype=np.float32)
    assert "float64" in message
    np.testing.assert_array_equal(codec.decode(wire, dtype="float64"), np.zeros(3))


def test_wrong_expected_shape_says_expected_and_got() -> None:
    wire = codec.encode(np.zeros((2, 3), dtype=np.float32))
    message = reject(wire, "expected (3, 2)", shape=(3, 2))
    assert "(2, 3)" in message
    assert codec.decode(wire, shape=(2, 3)).shape == (2, 3)


def test_what_names_the_value_in_errors() -> None:
    reject(b"", "gradient of rank 3", what="gradient of rank 3")


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(2, dtype=np.complex128),
        np.array([object(), 1], dtype=object),
        np.array(["a", "b"]),
        np.zeros(2, dtype="datetime64[s]"),
        np.zeros(2, dtype=np.int16),
    ],
    ids=["complex", "object", "str", "datetime", "int16"],
)
def test_unsupported_dtype_is_rejected_on_encode(bad: np.ndarray) -> None:
    with pytest.raises(CodecError, match="cannot be put on the wire") as info:
        codec.encode(bad)
    assert str(bad.dtype) in str(info.value)


def test_too_many_dimensions_on_encode() -> None:
    with pytest.raises(CodecError, match="9 dimensions"):
        codec.encode(np.zeros((1,) * 9, dtype=np.float32))


def test_no_pickle_on_the_wire() -> None:
    array = np.arange(4, dtype=np.float32)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(CodecError, match="magic"):
            codec.decode(pickle.dumps(array, protocol=protocol))
        with pytest.raises(CodecError):
            codec.decode_bundle(pickle.dumps({"x": array}, protocol=protocol))
    wire = codec.encode(array)
    assert wire[:4] == codec.MAGIC and b"numpy" not in wire


# --- bundles ----------------------------------------------------------------------


def test_bundle_round_trip_with_several_names() -> None:
    arrays = {
        "X": sample("float32", (5, 3)),
        "y": sample("uint8", (5,)),
        "poids_é": sample("float64", ()),
        "重み": sample("int64", (0,)),
        "a-very.long_name with spaces " * 3: sample("bool", (2, 2)),
        "": sample("float16", (3,)),
    }
    decoded = codec.decode_bundle(codec.encode_bundle(arrays))
    assert list(decoded) == list(arrays)
    for name, original in arrays.items():
        assert decoded[name].dtype == original.dtype
        np.testing.assert_array_equal(decoded[name], original)
        assert not decoded[name].flags.writeable


def test_empty_bundle() -> None:
    wire = codec.encode_bundle({})
    assert codec.decode_bundle(wire) == {}


def test_bundle_with_odd_name_and_payload_lengths_round_trips() -> None:
    wire = codec.encode_bundle({"a": np.arange(3, dtype=np.uint8), "bcd": np.arange(5, dtype=np.float64)})
    decoded = codec.decode_bundle(wire)
    np.testing.assert_array_equal(decoded["a"], np.arange(3, dtype=np.uint8))
    np.testing.assert_array_equal(decoded["bcd"], np.arange(5, dtype=np.float64))


def test_bundle_payloads_are_8_byte_aligned() -> None:
    wire = codec.encode_bundle({"w": np.arange(5, dtype=np.float64)})
    decoded = codec.decode_bundle(wire)
    assert decoded["w"].flags.aligned and decoded["w"].ctypes.data % 8 == 0


def test_bundle_truncated_anywhere_before_the_last_tensor_ends_is_rejected() -> None:
    wire = codec.encode_bundle({"X": np.arange(6, dtype=np.float32), "yy": np.arange(3, dtype=np.uint8)})
    for n in range(len(wire)):
        with pytest.raises(CodecError):
            codec.decode_bundle(wire[:n])


def test_bundle_truncation_messages_say_truncated() -> None:
    wire = codec.encode_bundle({"X": np.arange(6, dtype=np.float32), "yy": np.arange(4, dtype=np.float32)})
    # both tensors are whole 8-byte words, so no cut falls in padding
    assert len(codec.encode(np.arange(6, dtype=np.float32))) % 8 == 0
    assert len(codec.encode(np.arange(4, dtype=np.float32))) % 8 == 0
    for n in range(len(wire)):
        with pytest.raises(CodecError, match="truncated"):
            codec.decode_bundle(wire[:n])


def test_bundle_cut_in_final_padding_says_truncated() -> None:
    wire = codec.encode_bundle({"y": np.arange(3, dtype=np.uint8)})  # 27-byte tensor, 5 padding bytes
    with pytest.raises(CodecError, match="truncated"):
        codec.decode_bundle(wire[:-1])


def test_bundle_with_trailing_bytes() -> None:
    wire = codec.encode_bundle({"X": np.arange(2, dtype=np.float32)})
    with pytest.raises(CodecError, match="8 unexpected trailing bytes"):
        codec.decode_bundle(wire + b"\0" * 8)


def test_bundle_with_a_corrupted_entry_names_the_entry() -> None:
    wire = bytearray(codec.encode_bundle({"X": np.arange(4, dtype=np.float32), "y": np.ones(4, dtype=np.float32)}))
    wire[-3] ^= 0x10  # inside y's payload
    with pytest.raises(CodecError, match=r"entry 'y' is corrupt: checksum"):
        codec.decode_bundle(bytes(wire), what="shard 7")
    with pytest.raises(CodecError, match="shard 7"):
        codec.decode_bundle(bytes(wire), what="shard 7")


def test_bundle_bad_magic_and_version() -> None:
    wire = bytearray(codec.encode_bundle({"X": np.zeros(1, dtype=np.float32)}))
    with pytest.raises(CodecError, match="not a LambdaML bundle"):
        codec.decode_bundle(codec.encode(np.zeros(1, dtype=np.float32)))  # a tensor is not a bundle
    wire[4] = 7
    with pytest.raises(CodecError, match="version 7"):
        codec.decode_bundle(bytes(wire))


def test_bundle_entry_name_that_is_not_utf8() -> None:
    wire = bytearray(codec.encode_bundle({"X": np.zeros(1, dtype=np.float32)}))
    name_at = codec._CONTAINER_HEADER.size + codec._ENTRY.size
    assert wire[name_at : name_at + 1] == b"X"
    wire[name_at] = 0xFF
    with pytest.raises(CodecError, match="not UTF-8"):
        codec.decode_bundle(bytes(wire))


def test_bundle_claiming_more_entries_than_it_holds() -> None:
    wire = bytearray(codec.encode_bundle({"X": np.zeros(1, dtype=np.float32)}))
    struct.pack_into("<I", wire, 8, 2)
    with pytest.raises(CodecError, match="truncated in its entry table"):
        codec.decode_bundle(bytes(wire))


def test_reserved_header_bytes_are_checked() -> None:
    wire = bytearray(codec.encode(np.arange(4, dtype=np.float32)))
    wire[7] = 1  # a reserved byte: not part of any field, so only this check can catch it
    with pytest.raises(CodecError, match="reserved"):
        codec.decode(bytes(wire))


def test_bundle_entry_name_is_checksummed() -> None:
    wire = bytearray(codec.encode_bundle({"X": np.zeros(3, dtype=np.float32)}))
    index = wire.index(b"X")
    wire[index] = ord("Y")
    with pytest.raises(CodecError, match="entry table checksum"):
        codec.decode_bundle(bytes(wire))


def test_a_packed_index_is_checked_before_its_slots_are_trusted() -> None:
    values = [b"a" * 3, b"b" * 17, b""]
    packed = codec.encode_packed(values)
    index = packed[: codec.packed_index_bytes(3)]
    slots = codec.decode_packed_index(index, 3)
    assert [packed[lo:hi] for lo, hi in slots] == values

    def damaged(at: int, byte: int) -> bytes:
        return index[:at] + bytes([byte]) + index[at + 1 :]

    cases = {
        damaged(0, ord("X")): "not a LambdaML packed value",
        damaged(4, codec.VERSION + 1): "packed value format version",
        damaged(len(index) - 1, index[-1] ^ 1): "index checksum mismatch",
        index[:-1]: "index is truncated",
    }
    for raw, message in cases.items():
        with pytest.raises(CodecError, match=message):
            codec.decode_packed_index(raw, 3)
    with pytest.raises(CodecError, match="holds 3 values, expected 2"):
        codec.decode_packed_index(codec.encode_packed(values[:3])[: codec.packed_index_bytes(2)], 2)


def test_a_bundle_s_length_is_known_without_encoding_it() -> None:
    rng = np.random.default_rng(0)
    for sizes in ([0], [1, 7], [3, 1000, 1], [64]):
        arrays = {
            f"entry-{i}-é": rng.standard_normal(n).astype(dtype)
            for i, (n, dtype) in enumerate(zip(sizes, [np.float32, np.uint8, np.float64, np.uint32], strict=False))
        }
        assert codec.bundle_bytes(arrays) == len(codec.encode_bundle(arrays))
    assert codec.bundle_bytes({"grid": np.zeros((3, 5), dtype=np.int64)}) == len(
        codec.encode_bundle({"grid": np.zeros((3, 5), dtype=np.int64)})
    )


@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3)])
def test_a_value_whose_payload_was_read_into_place_checks_as_decode_does(shape: tuple[int, ...]) -> None:
    values = sample("float32", shape)
    wire = codec.encode(values)
    head = len(wire) - values.nbytes
    out = np.empty(shape, np.float32)
    out.data.cast("B")[:] = wire[head:]  # what a channel does, reading the payload straight into place
    codec.check_placed(wire[:head], out)
    assert np.array_equal(out, values)


def test_a_value_read_into_place_is_refused_when_any_byte_of_it_is_wrong() -> None:
    values = np.arange(6, dtype=np.float32)
    wire = codec.encode(values)
    head = len(wire) - values.nbytes
    for i in range(HEADER, len(wire)):  # the header's own fields are tested through decode
        corrupt = bytearray(wire)
        corrupt[i] ^= 0x01
        out = np.frombuffer(bytes(corrupt[head:]), np.float32).copy()
        with pytest.raises(CodecError, match=r"corrupt|shape"):
            codec.check_placed(bytes(corrupt[:head]), out, what="merged chunk 1")


def test_a_value_read_into_a_place_of_another_kind_is_refused() -> None:
    wire = codec.encode(np.arange(6, dtype=np.float32))
    head, payload = wire[:-24], wire[-24:]
    for out, match in (
        (np.frombuffer(payload, np.int32).copy(), "has dtype float32, expected int32"),
        (np.frombuffer(payload, np.float32).reshape(2, 3).copy(), r"has shape \(6,\), expected \(2, 3\)"),
        (np.frombuffer(payload[:20], np.float32).copy(), "truncated or padded"),
    ):
        with pytest.raises(CodecError, match=match):
            codec.check_placed(head, out)
    with pytest.raises(CodecError, match="truncated"):
        codec.check_placed(head[:10], np.zeros(6, np.float32))
