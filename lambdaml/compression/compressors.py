"""The compressors: identity, 1-bit sign with scale, QSGD, min-max uint8, top-k.

Scales and values keep the input's float dtype; signs, levels and codes are bit-packed.
Per element on the wire: identity 32/64 bits, onebit 1, qsgd 1 + bits(levels), uint8 8,
topk 32 + 32/64 per kept element (index and value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.arrays import Array
from lambdaml.compression.base import (
    Compressor,
    Payload,
    entry,
    float_entry,
    pack_codes,
    packed_length,
    unpack_codes,
)
from lambdaml.errors import CodecError

if TYPE_CHECKING:
    from lambdaml.config import CompressionSpec


def l2_norm(x: Array) -> float:
    """||x||_2 without BLAS: a BLAS dot on a busy machine can take milliseconds to start its threads."""
    return float(np.sqrt(np.square(x, dtype=np.float64).sum()))


def _flat(x: Array) -> Array:
    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.dtype.kind != "f":
        raise TypeError(f"only float vectors are compressed, not {flat.dtype}")
    return flat


class Identity(Compressor):
    """Sends the vector as it is: the reference every compressed method must reduce to."""

    info = catalogue.COMPRESSORS["identity"]

    def compress(self, x: Array, rng: np.random.Generator | None = None) -> Payload:
        return {"value": _flat(x)}

    def decompress(self, payload: Mapping[str, Array], size: int) -> Array:
        return np.array(float_entry(payload, "value", length=size))


class OneBit(Compressor):
    """C(x) = (||x||_2 / sqrt(d)) * sign(x), sign(0) = +1: one bit per element and one scale.

    The output has exactly the input's l2 norm (up to rounding of the scale).
    """

    info = catalogue.COMPRESSORS["onebit"]

    def compress(self, x: Array, rng: np.random.Generator | None = None) -> Payload:
        flat = _flat(x)
        scale = l2_norm(flat) / np.sqrt(flat.size) if flat.size else 0.0
        return {"signs": np.packbits(flat < 0), "scale": np.array([scale], dtype=flat.dtype)}

    def decompress(self, payload: Mapping[str, Array], size: int) -> Array:
        scale = float_entry(payload, "scale", length=1)
        negative = np.unpackbits(_packed(payload, "signs", size, 1), count=size).view(bool)
        return np.where(negative, -scale[0], scale[0]).astype(scale.dtype, copy=False)


class QSGD(Compressor):
    """Unbiased stochastic rounding of |x_i| / ||x||_2 onto ``levels`` levels, sign kept.

    Each element travels as its level and sign in 1 + bits(levels) bits, plus one norm.
    """

    info = catalogue.COMPRESSORS["qsgd"]

    def __init__(self, levels: int = 16) -> None:
        if not 1 <= levels < 2**15:
            raise ValueError(f"qsgd needs 1 to {2**15 - 1} levels, not {levels}")
        self.levels = levels
        self.width = levels.bit_length() + 1

    @classmethod
    def from_spec(cls, spec: CompressionSpec) -> QSGD:
        return cls(spec.levels)

    def compress(self, x: Array, rng: np.random.Generator | None = None) -> Payload:
        if rng is None:
            raise ValueError("qsgd rounds stochastically and needs a random generator")
        flat = _flat(x)
        norm = l2_norm(flat)
        if norm > 0:
            scaled = np.abs(flat) / norm * self.levels
            level = np.floor(scaled)
            level += rng.random(flat.size) < scaled - level  # up with probability = the remainder
            level = np.minimum(level, self.levels).astype(np.uint16)
        else:
            level = np.zeros(flat.size, dtype=np.uint16)
        codes = (level << 1) | (flat < 0)
        return {"codes": pack_codes(codes, self.width), "norm": np.array([norm], dtype=flat.dtype)}

    def decompress(self, payload: Mapping[str, Array], size: int) -> Array:
        norm = float_entry(payload, "norm", length=1)
        codes = unpack_codes(_packed(payload, "codes", size, self.width), self.width, size)
        level = codes >> 1
        if np.any(level > self.levels):
            raise CodecError(f"qsgd value has a level above {self.levels} (sent with other settings?)")
        magnitude = level.astype(norm.dtype) * (norm[0] / self.levels)
        return np.where((codes & 1) == 1, -magnitude, magnitude)


class MinMaxUint8(Compressor):
    """Per vector (per chunk): codes = round((x - min) * 255 / (max - min)), deterministic."""

    info = catalogue.COMPRESSORS["uint8"]

    def compress(self, x: Array, rng: np.random.Generator | None = None) -> Payload:
        flat = _flat(x)
        lo, hi = (flat.min(), flat.max()) if flat.size else (0.0, 0.0)
        if hi > lo:
            codes = np.rint((flat - lo) * (255.0 / (hi - lo)))
            codes = np.clip(codes, 0, 255).astype(np.uint8)
        else:
            codes = np.zeros(flat.size, dtype=np.uint8)
        return {"codes": codes, "range": np.array([lo, hi], dtype=flat.dtype)}

    def decompress(self, payload: Mapping[str, Array], size: int) -> Array:
        lo, hi = float_entry(payload, "range", length=2)
        codes = entry(payload, "codes", length=size)
        if codes.dtype != np.uint8:
            raise CodecError(f"uint8 codes arrived as {codes.dtype}")
        step = (hi - lo) / 255.0
        values: Array = (lo + codes * step).astype(np.result_type(lo), copy=False)
        return values


class TopK(Compressor):
    """The ``ratio`` * d entries of largest magnitude (at least one), with their indices."""

    info = catalogue.COMPRESSORS["topk"]

    def __init__(self, ratio: float = 0.01) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"topk ratio must be in (0, 1], not {ratio}")
        self.ratio = ratio

    @classmethod
    def from_spec(cls, spec: CompressionSpec) -> TopK:
        return cls(spec.ratio)

    def kept(self, size: int) -> int:
        return min(size, max(1, int(np.ceil(self.ratio * size)))) if size else 0

    def compress(self, x: Array, rng: np.random.Generator | None = None) -> Payload:
        flat = _flat(x)
        k = self.kept(flat.size)
        index = np.sort(np.argpartition(-np.abs(flat), k - 1)[:k]) if k < flat.size else np.arange(flat.size)
        return {"index": index.astype(np.uint32), "value": flat[index]}

    def decompress(self, payload: Mapping[str, Array], size: int) -> Array:
        k = self.kept(size)
        index, value = entry(payload, "index", length=k), float_entry(payload, "value", length=k)
        if index.dtype != np.uint32 or (k and (index[-1] >= size or np.any(np.diff(index.astype(np.int64)) <= 0))):
            raise CodecError(f"topk indices are not increasing uint32 below {size}")
        out = np.zeros(size, dtype=value.dtype)
        out[index] = value
        return out


def _packed(payload: Mapping[str, Array], name: str, size: int, width: int) -> Array:
    packed = entry(payload, name, length=packed_length(size, width))
    if packed.dtype != np.uint8:
        raise CodecError(f"compressed value's {name!r} has dtype {packed.dtype}, expected uint8")
    return packed
