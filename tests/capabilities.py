"""The channel kinds that have each capability, as their catalogue descriptions say: what a test
holds the channel classes to (each class reads its own from its description)."""

from __future__ import annotations

from lambdaml import catalogue

RANGED_READ_CHANNELS = frozenset(kind for kind, info in catalogue.CHANNELS.items() if info.ranged_reads)
ORDERED_WRITE_CHANNELS = frozenset(kind for kind, info in catalogue.CHANNELS.items() if info.ordered_writes)
