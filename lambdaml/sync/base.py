"""The SyncProtocol interface: when workers communicate and how their contributions merge.

An algorithm calls these operations and never asks which protocol runs. BSP
(``lambdaml.sync.bsp``) sums through the communicator's collectives, ASP/SSP
(``lambdaml.sync.asp``) shares additive updates through a log on the channel, and the
ring (``lambdaml.sync.ring``) exchanges messages with neighbours. The protocol also owns
what a checkpoint needs of it and what the worker loop asks (how far it got, restarts).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar

from lambdaml.arrays import Array

if TYPE_CHECKING:
    from lambdaml.comm.base import Communicator
    from lambdaml.models.base import Model


def mean_loss(total: float, count: float) -> float:
    """A loss sum over ``count`` samples as a mean (NaN for no samples)."""
    return float(total / count) if count else float("nan")


class SyncProtocol(ABC):
    """One worker's side of a synchronization protocol, over its communicator."""

    #: Workers run without barriers (ASP/SSP): checkpoints are spaced by pushes, not rounds.
    asynchronous: ClassVar[bool] = False
    #: The prefix of its entries in a checkpoint.
    checkpoint_prefix: ClassVar[str] = "sync."

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm

    @abstractmethod
    def sum(self, values: Array) -> Array:
        """The exact sum of ``values`` over every worker."""

    @abstractmethod
    def sum_with(self, vector: Array, extras: Array) -> tuple[Array, Array]:
        """Sums over every worker of ``vector`` (compressed where the job says so) and of ``extras`` (exact)."""

    @abstractmethod
    def gradients(self, grad: Array, count: int, loss: float) -> tuple[Array, float, float]:
        """The gradient sum, sample count and loss sum that one step is taken on."""

    @abstractmethod
    def average(self, model: Array, reference: Array, count: float, loss_sum: float) -> tuple[Array, float]:
        """Model averaging: the averaged model and the mean loss of the samples it saw.

        ``model`` is this worker's after its local steps, ``reference`` the last average
        it started them from, ``count``/``loss_sum`` its samples since then.
        """

    def sharing(self, params: Array) -> AbstractContextManager[None]:
        """Around a step that changes ``params`` in place: what the others must learn of it (ASP)."""
        return contextlib.nullcontext()

    def finish(self, params: Array) -> Array:
        """The model a worker ends with, after its last epoch."""
        return params

    def attach_gradient_sync(self, model: Model) -> bool:
        """Let the communicator sum gradients in the backward pass (DDP), where the protocol allows it."""
        return False

    def prepare_restarts(self) -> None:
        """This worker may be restarted from its checkpoint (Lambda) and must then pick up exactly."""

    def progress(self) -> int:
        """How far this worker got, in the unit checkpoints are spaced by (rounds, or pushes)."""
        return self.comm.round

    def checkpointed(self) -> None:
        """The worker saved a checkpoint."""

    def state_dict(self) -> dict[str, Array]:
        return {}

    def load_state_dict(self, state: Mapping[str, Array]) -> None:
        """Resume at a checkpoint's ``state_dict``."""

    def stats(self) -> dict[str, float]:
        return {}
