"""Neighbour exchange on a ring over a channel: each rank reads only its neighbours' keys.

Every round a rank writes its message once, under a key of its own, and waits for the
messages of its ring neighbours (rank - 1 and rank + 1; one neighbour when W = 2, none
when W = 1). Nobody ever reads a key of a rank that is not its neighbour.
"""

from __future__ import annotations

from collections.abc import Mapping

from lambdaml import codec
from lambdaml.arrays import Array
from lambdaml.comm.channel import ChannelCommunicator


def ring_neighbours(rank: int, world: int) -> list[int]:
    """The distinct ring neighbours of ``rank``: none for W = 1, one for W = 2, two from W = 3."""
    return sorted({(rank - 1) % world, (rank + 1) % world} - {rank})


def ring_weight(world: int) -> float:
    """The mixing weight of a rank and of each neighbour: uniform, so the matrix is doubly stochastic."""
    return 1.0 / (1 + len(ring_neighbours(0, world)))


class RingExchange:
    """Write my message for this round, read my neighbours' (codec bundles of named arrays)."""

    tag = "ring"

    def __init__(self, comm: ChannelCommunicator) -> None:
        self.comm = comm
        self.neighbours = ring_neighbours(comm.rank, comm.world_size)

    def exchange(self, message: Mapping[str, Array]) -> dict[int, dict[str, Array]]:
        """Send ``message`` to my neighbours and return theirs, by rank (empty when alone)."""
        if not self.neighbours:
            return {}
        number = self.comm.round
        raw = self.comm.exchange(self.tag, self.neighbours, codec.encode_bundle(message))
        return {
            j: dict(codec.decode_bundle(value, what=f"rank {j}'s message of round {number}"))
            for j, value in raw.items()
        }
