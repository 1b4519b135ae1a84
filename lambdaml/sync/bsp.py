"""BSP: every exchange is a collective that all workers join, so each round is a barrier.

The sums run through the communicator's AllReduce or ScatterReduce (or torch.distributed
on IaaS); a job with ``compression`` sends its vectors through the same collective with a
compressing codec and error feedback on both sides, its batch sizes and losses exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from lambdaml.arrays import Array
from lambdaml.comm.base import Communicator
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.compressed import CompressedAllreduce
from lambdaml.comm.patterns import AllReduce
from lambdaml.compression import make_compressor
from lambdaml.sync.base import SyncProtocol, mean_loss

if TYPE_CHECKING:
    from lambdaml.config import AlgorithmSpec
    from lambdaml.models.base import Model


def compressed_allreduce(spec: AlgorithmSpec, comm: Communicator) -> CompressedAllreduce | None:
    """The compressed collective a spec asks for (None: uncompressed), cut as the communicator's pattern cuts."""
    compression = spec.compression_spec
    if compression is None:
        return None
    return CompressedAllreduce(
        make_compressor(compression),
        rank=comm.rank,
        world=comm.world_size,
        scatter=not (isinstance(comm, ChannelCommunicator) and isinstance(comm.pattern, AllReduce)),
        error_feedback=compression.error_feedback is not False,
        seed=spec.seed,
    )


class BSP(SyncProtocol):
    """Bulk-synchronous sums and averages; ``reducer`` compresses the vectors (None: exact)."""

    checkpoint_prefix = "reducer."

    def __init__(self, comm: Communicator, reducer: CompressedAllreduce | None = None) -> None:
        super().__init__(comm)
        self.reducer = reducer

    def sum(self, values: Array) -> Array:
        return self.comm.allreduce(values)

    def sum_with(self, vector: Array, extras: Array) -> tuple[Array, Array]:
        if self.reducer is None:  # one collective: the extras ride at the end of the vector
            reduced = self.comm.allreduce(np.concatenate([vector, extras.astype(vector.dtype)]))
            return reduced[: vector.size], reduced[vector.size :]
        summed, summed_extras = self.reducer.allreduce(self.comm, vector, extras)
        assert summed_extras is not None
        return summed, summed_extras

    def gradients(self, grad: Array, count: int, loss: float) -> tuple[Array, float, float]:
        """Every worker's: so unequal batches average exactly, and one collective serves all three."""
        summed, (total_count, loss_sum) = self.sum_with(grad, np.array([count, loss], dtype=grad.dtype))
        return summed, total_count, loss_sum

    def average(self, model: Array, reference: Array, count: float, loss_sum: float) -> tuple[Array, float]:
        world = self.comm.world_size
        stats = np.array([count, loss_sum], dtype=model.dtype)
        if self.reducer is None:  # the exact mean of the models
            summed, (total_count, total_loss) = self.sum_with(model, stats)
            return summed / world, mean_loss(float(total_loss), float(total_count))
        # Compressed: the mean progress since the last average, added to it; compressing the
        # weights themselves would lose what the compressor drops of them.
        progress, (total_count, total_loss) = self.sum_with(model - reference, stats)
        return reference + progress / world, mean_loss(total_loss, total_count)

    def attach_gradient_sync(self, model: Model) -> bool:
        # A compressed job keeps its compressor: DDP would sum the gradients uncompressed.
        return self.reducer is None and self.comm.attach_gradient_sync(model)

    def state_dict(self) -> dict[str, Array]:
        return {} if self.reducer is None else self.reducer.state_dict()

    def load_state_dict(self, state: Mapping[str, Array]) -> None:
        if self.reducer is not None:
            self.reducer.load_state_dict(state)
