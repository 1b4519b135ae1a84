"""Compressors for what workers send over a channel, and error feedback as explicit state.

A compressor turns a flat vector into a *payload*: a few named arrays (packed bits,
scales, indices) that travel as one codec bundle, so a compressed value is checked like
every other value on the wire. ``decompress`` is deterministic, so a sender knows
bit for bit what its receivers will read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lambdaml import catalogue
from lambdaml.compression.base import Compressor, ErrorFeedback, Payload, roundtrip
from lambdaml.registry import Registry

if TYPE_CHECKING:
    from lambdaml.config import CompressionSpec

COMPRESSORS: Registry[type[Compressor]] = Registry.of("compressor", catalogue.COMPRESSORS)


def make_compressor(spec: CompressionSpec) -> Compressor:
    """The compressor a job's ``compression`` names, configured from it."""
    return COMPRESSORS.get(spec.name).from_spec(spec)


__all__ = ["COMPRESSORS", "Compressor", "ErrorFeedback", "Payload", "make_compressor", "roundtrip"]
