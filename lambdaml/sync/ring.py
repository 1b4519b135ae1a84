"""The ring protocol of decentralized training: each step a worker exchanges messages with
its ring neighbours only (``lambdaml.comm.ring``), with no collective per step.

Two BSP collectives keep results comparable with the other algorithms: the epoch's sample
count and loss sum are summed over all workers, and after the last epoch the models are
averaged once, so every worker ends with the average model the methods' results are about.
"""

from __future__ import annotations

from collections.abc import Mapping

from lambdaml.arrays import Array
from lambdaml.comm.base import Communicator
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.ring import RingExchange
from lambdaml.sync.bsp import BSP


class RingProtocol(BSP):
    """Neighbour exchange each step; exact BSP sums for the loss curve and the final average."""

    checkpoint_prefix = "ring."

    def __init__(self, comm: Communicator) -> None:
        if not isinstance(comm, ChannelCommunicator):
            raise TypeError("decentralized training runs over a channel communicator")
        super().__init__(comm)
        self.ring = RingExchange(comm)
        self.neighbours = self.ring.neighbours

    def exchange(self, message: Mapping[str, Array]) -> dict[int, dict[str, Array]]:
        """Send ``message`` to my neighbours and return theirs, by rank (empty when alone)."""
        return self.ring.exchange(message)

    def finish(self, params: Array) -> Array:
        return self.comm.allreduce(params, op="mean")
