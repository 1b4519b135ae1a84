"""Compressors for what workers send over a channel, and error feedback as explicit state.

A compressor turns a flat vector into a *payload*: a few named arrays (packed bits,
scales, indices) that travel as one codec bundle, so a compressed value is checked like
every other value on the wire. ``decompress`` is deterministic, so a sender knows
bit for bit what its receivers will read.
"""

from __future__ import annotations

from lambdaml.compression.base import Compressor, ErrorFeedback, Payload, make_compressor, roundtrip
from lambdaml.registry import Registry

COMPRESSORS: Registry[type[Compressor]] = Registry("compressor")
COMPRESSORS.register("identity", "lambdaml.compression.compressors:Identity")
COMPRESSORS.register("onebit", "lambdaml.compression.compressors:OneBit")
COMPRESSORS.register("qsgd", "lambdaml.compression.compressors:QSGD")
COMPRESSORS.register("uint8", "lambdaml.compression.compressors:MinMaxUint8")
COMPRESSORS.register("topk", "lambdaml.compression.compressors:TopK")

__all__ = ["COMPRESSORS", "Compressor", "ErrorFeedback", "Payload", "make_compressor", "roundtrip"]
