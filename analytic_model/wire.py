"""Bytes on the wire of what a worker sends: codec bundles of compressed payloads, ASP updates, ring messages.

The model stays pure Python (no numpy, so not the codec or the compressors): these mirror
``lambdaml.codec.encode_bundle``, ``lambdaml.seal`` and each compressor's payload in
``lambdaml/compression/compressors.py``, and a unit test holds every size equal to the length
of the real encoded value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lambdaml import catalogue
from lambdaml.errors import ConfigError

TENSOR_HEADER_BYTES = 24  # codec._HEADER: magic, version, dtype, ndim, payload length, CRC
DIM_BYTES = 8  # each dimension of the shape
CONTAINER_HEADER_BYTES = 16  # codec._CONTAINER_HEADER: a bundle's magic, version, count, table CRC
ENTRY_BYTES = 16  # codec._ENTRY: name length, tensor length
SEAL_BYTES = 24  # seal.OVERHEAD: the tag binding a value to its key
EXACT_ENTRY = "exact"  # comm.compressed._EXACT: the uncompressed extras riding in chunk 0
INT64_BYTES, UINT32_BYTES = 8, 4


def _pad8(n: int) -> int:
    return (-n) % 8


def tensor_bytes(payload_bytes: int) -> int:
    """One 1-d tensor on the wire (``codec.encode``)."""
    return TENSOR_HEADER_BYTES + DIM_BYTES + payload_bytes


def bundle_bytes(entries: Sequence[tuple[str, int]]) -> int:
    """``codec.encode_bundle`` of 1-d arrays given as (name, payload bytes)."""
    total = CONTAINER_HEADER_BYTES
    for name, payload in entries:
        length = len(name.encode("utf-8"))
        tensor = tensor_bytes(payload)
        total += ENTRY_BYTES + length + _pad8(length) + tensor + _pad8(tensor)
    return total


@dataclass(frozen=True)
class Compression:
    """A job's ``compression``: the compressor and the settings its wire size depends on."""

    name: str
    levels: int = 16  # qsgd
    ratio: float = 0.01  # topk

    def check(self) -> None:
        catalogue.lookup(catalogue.COMPRESSORS, "compressor", self.name)
        if not 1 <= self.levels <= 32767:  # the job file's CompressionSpec.levels
            raise ConfigError(f"levels must be 1-32767, got {self.levels!r}")
        if not 0 < self.ratio <= 1:  # CompressionSpec.ratio
            raise ConfigError(f"ratio must be in (0, 1], got {self.ratio!r}")

    def kept(self, values: int) -> int:
        """Top-k's kept entries (``TopK.kept``)."""
        return min(values, max(1, math.ceil(self.ratio * values))) if values else 0

    def payload(self, values: int, float_bytes: int) -> list[tuple[str, int]]:
        """The compressor's named arrays for ``values`` floats, as (name, bytes)."""
        if self.name == "identity":
            return [("value", values * float_bytes)]
        if self.name == "onebit":
            return [("signs", -(-values // 8)), ("scale", float_bytes)]
        if self.name == "qsgd":
            width = self.levels.bit_length() + 1
            return [("codes", -(-values * width // 8)), ("norm", float_bytes)]
        if self.name == "uint8":
            return [("codes", values), ("range", 2 * float_bytes)]
        if self.name == "topk":
            k = self.kept(values)
            return [("index", k * UINT32_BYTES), ("value", k * float_bytes)]
        raise ConfigError(f"unknown compressor {self.name!r}; known: {', '.join(catalogue.COMPRESSORS)}")

    def value_bytes(self, values: int, float_bytes: int, extras: int = 0) -> int:
        """One compressed value on a channel: the bundle (with ``extras`` exact floats, if any) and its seal."""
        entries = self.payload(values, float_bytes)
        if extras:
            entries.append((EXACT_ENTRY, extras * float_bytes))
        return bundle_bytes(entries) + SEAL_BYTES


def update_bytes(values: int, float_bytes: int) -> int:
    """One ASP/SSP update on a channel (``sync.asp.encode_update``: the writer's rank and the delta)."""
    return bundle_bytes([("rank", INT64_BYTES), ("delta", values * float_bytes)]) + SEAL_BYTES


#: CPU of a compressor per element, in passes of one float vector added to another (what
#: ``compute.add_Bps`` times): compressing with error feedback (p = x + e, q = C(p), e = p - q)
#: into a codec bundle, and decompressing one, beyond a plain tensor's encode and decode.
#: Measured: the least of 30 calls of each at 1e5 and 1e6 float64 against ``np.add`` of the same
#: vectors, on one core of a 2-core AMD EPYC VM (2026-12-02); the figures at 1e5 (the two sizes
#: agree within about 25%, qsgd and identity's compress within 45%). The shipped figures: a
#: calibration measures its machine's (``lambdaml.calibrate.compute.measure_codec_passes``, the
#: profile's ``compute.codec_passes``), against its own ``add_Bps``, and those replace these.
CODEC_PASSES: dict[str, tuple[float, float]] = {  # (compress, decompress)
    "identity": (6.0, 1.2),
    "onebit": (20.0, 14.0),
    "qsgd": (115.0, 52.0),
    "uint8": (11.0, 2.3),
    "topk": (15.0, 1.0),
}
#: The fixed CPU of one compress (with error feedback, into a codec bundle) and one decompress
#: (from a bundle) beyond what a plain tensor's encode and decode cost, in float64 values added
#: (``compute.add_Bps``): what a small vector costs whatever its length (numpy calls, the bundle's
#: table). Measured as above on 29-value vectors, against ``np.add`` of 1e6.
CODEC_CALL_VALUES: dict[str, tuple[float, float]] = {
    "identity": (4e4, 2e4),
    "onebit": (1.1e5, 8e4),
    "qsgd": (2.7e5, 1.7e5),
    "uint8": (1.3e5, 8e4),
    "topk": (1.8e5, 1.5e5),
}
