"""The Compressor interface, bit packing, and error feedback (EF) as a checkpointable object."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lambdaml.arrays import Array
from lambdaml.catalogue import CompressorInfo
from lambdaml.errors import CodecError

if TYPE_CHECKING:
    from lambdaml.config import CompressionSpec

#: What a compressor sends: named arrays, encoded on the wire as one codec bundle.
Payload = dict[str, Array]

_PACK_WIDTH = 16  # bit packing handles codes of up to 16 bits


class Compressor(ABC):
    """``compress(x) -> payload`` and its deterministic inverse ``decompress(payload, size)``.

    Compressors hold only configuration; a stochastic one draws from the generator it is
    handed, so its randomness is part of the caller's (checkpointed) state. A compressor sets
    ``info`` to its catalogue description, which says whether it is stochastic.
    """

    info: ClassVar[CompressorInfo]
    #: Whether ``compress`` needs a random generator (QSGD's stochastic rounding).
    stochastic: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "info" in vars(cls):
            cls.stochastic = cls.info.stochastic

    @classmethod
    def from_spec(cls, spec: CompressionSpec) -> Compressor:
        return cls()

    @abstractmethod
    def compress(self, x: Array, rng: np.random.Generator | None = None) -> Payload:
        """Compress a flat float vector."""

    @abstractmethod
    def decompress(self, payload: Mapping[str, Array], size: int) -> Array:
        """The vector of ``size`` elements that ``payload`` stands for (a new, writable array)."""


def roundtrip(compressor: Compressor, x: Array, rng: np.random.Generator | None = None) -> tuple[Payload, Array]:
    """The payload for ``x`` and what every receiver will decompress from it."""
    payload = compressor.compress(x, rng)
    return payload, compressor.decompress(payload, x.size)


class ErrorFeedback:
    """p = x + e; q = C(p); e = p - q; send q. What compression dropped is sent later.

    Summed over steps, what was sent plus the final memory equals the sum of the inputs,
    so no part of a gradient is ever lost, only delayed. Disabled, it is plain compression.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.memory: Array | None = None

    def compress(
        self, compressor: Compressor, x: Array, rng: np.random.Generator | None = None
    ) -> tuple[Payload, Array]:
        p = x if self.memory is None else x + self.memory
        payload, q = roundtrip(compressor, p, rng)
        if self.enabled:
            self.memory = p - q
        return payload, q

    def state_dict(self) -> dict[str, Array]:
        return {} if self.memory is None else {"memory": self.memory.copy()}

    def load_state_dict(self, state: Mapping[str, Array]) -> None:
        self.memory = np.array(state["memory"]) if "memory" in state else None


# --- helpers for the compressors ------------------------------------------------------


def entry(payload: Mapping[str, Array], name: str, *, length: int | None = None) -> Array:
    """A payload's array ``name`` (1-d, of ``length`` elements if given), or a CodecError."""
    try:
        array = payload[name]
    except KeyError:
        raise CodecError(f"compressed value lacks its {name!r} entry (sent by another compressor?)") from None
    if array.ndim != 1 or (length is not None and array.size != length):
        raise CodecError(f"compressed value's {name!r} has shape {array.shape}, expected ({length},)")
    return array


def float_entry(payload: Mapping[str, Array], name: str, *, length: int | None = None) -> Array:
    array = entry(payload, name, length=length)
    if array.dtype.kind != "f":
        raise CodecError(f"compressed value's {name!r} has dtype {array.dtype}, expected a float")
    return array


def packed_length(size: int, width: int) -> int:
    return -(-size * width // 8)


def pack_codes(codes: Array, width: int) -> Array:
    """Unsigned codes below ``2**width`` as a dense bit stream (``width`` bits each, MSB first)."""
    if not 1 <= width <= _PACK_WIDTH:
        raise ValueError(f"codes of {width} bits cannot be packed")
    wide = np.ascontiguousarray(codes, dtype=">u2")
    bits = np.unpackbits(wide.view(np.uint8)).reshape(-1, _PACK_WIDTH)[:, _PACK_WIDTH - width :]
    return np.packbits(bits.reshape(-1))


def unpack_codes(packed: Array, width: int, size: int) -> Array:
    """Inverse of ``pack_codes`` for ``size`` codes; rejects a stream of the wrong length."""
    if packed.dtype != np.uint8 or packed.ndim != 1 or packed.size != packed_length(size, width):
        raise CodecError(
            f"packed codes have {packed.size} bytes of {packed.dtype}; {size} codes of {width} bits "
            f"need {packed_length(size, width)} uint8"
        )
    bits = np.unpackbits(packed, count=size * width).reshape(size, width)
    wide = np.zeros((size, _PACK_WIDTH), dtype=np.uint8)
    wide[:, _PACK_WIDTH - width :] = bits
    return np.packbits(wide.reshape(-1)).view(">u2").astype(np.uint16)
