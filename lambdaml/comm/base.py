"""The Communicator interface shared by channel (FaaS) and torch.distributed (IaaS) workers."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal

import numpy as np

from lambdaml.arrays import Array
from lambdaml.errors import Diverged

if TYPE_CHECKING:
    from lambdaml.models.base import Model

ReduceOp = Literal["sum", "mean"]


def all_finite(x: Array) -> bool:
    """Whether ``x`` holds no NaN or infinity: one sum, and an exact look only when the sum is not finite."""
    return bool(np.isfinite(np.sum(x))) or bool(np.isfinite(x).all())


def check_finite(x: Array, rank: int, what: str) -> None:
    """Stop a diverged worker before a non-finite value leaves it (channel, checkpoint or model)."""
    if not all_finite(x):
        raise Diverged(
            f"training diverged: rank {rank}'s {what} holds NaN or infinity, so nothing was written; "
            "try a smaller learning rate (or l2)"
        )


class Communicator(ABC):
    """Rank, world size and the collectives the algorithms call.

    ``comm_s`` is the wall time spent inside collectives; ``wait_s`` the part of it spent
    waiting for other workers rather than moving bytes.
    """

    def __init__(self, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size}")
        self.rank = rank
        self.world_size = world_size
        self.comm_s = 0.0
        self.round = 0  # collectives issued so far (a checkpoint records it)

    @abstractmethod
    def _allreduce(self, x: Array) -> Array:
        """Sum of ``x`` over all ranks, identical on every rank."""

    @abstractmethod
    def barrier(self, name: str) -> None: ...

    @property
    @abstractmethod
    def wait_s(self) -> float: ...

    def allreduce(self, x: Array, op: ReduceOp = "sum") -> Array:
        check_finite(x, self.rank, "update")
        started = time.perf_counter()
        try:
            total = x.copy() if self.world_size == 1 else self._allreduce(x)
        finally:
            self.comm_s += time.perf_counter() - started
        if op == "mean":
            total = total / self.world_size
        return total

    def attach_gradient_sync(self, model: Model) -> bool:
        """Let the communicator sum gradients inside the model's backward pass (DDP).

        True: ``model.loss_grad_sum`` now returns sums over every worker's batch, and the
        algorithm reduces only its statistics. Channels cannot overlap with backward: False.
        """
        return False

    def finish(self, *, early: bool = False) -> None:
        """Called once when the worker's training ends; cleans up what it can.

        ``early``: this invocation stops for a continuation (Lambda), the job goes on.
        """

    def abandon(self) -> None:
        """Called when the worker fails: let go of what the peers would otherwise wait on."""

    def stats(self) -> dict[str, float]:
        return {}
