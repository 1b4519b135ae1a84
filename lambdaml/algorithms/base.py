"""The algorithm interface: hooks the worker loop calls, and a checkpointable state.

The hyperparameters are a frozen, validated ``AlgorithmSpec`` (the algorithm's own subclass,
named by its catalogue description); ``reify`` (``lambdaml.algorithms``) turns them into the
mutable state one worker trains with (the BAGUA split of configuration from state). An
algorithm communicates only through its ``sync`` protocol (BSP, ASP/SSP or the ring), so one
implementation runs under each.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lambdaml.arrays import Array
from lambdaml.catalogue import AlgorithmInfo, CompressionUse
from lambdaml.data.sparse import Features
from lambdaml.optim import make_optimizer
from lambdaml.sync.base import mean_loss

if TYPE_CHECKING:
    from lambdaml.comm.base import Communicator
    from lambdaml.config import AlgorithmSpec
    from lambdaml.models.base import Model
    from lambdaml.sync.base import SyncProtocol

#: What a class reads from its description (``AlgorithmInfo`` says what each means).
CAPABILITIES = ("supports_async", "reduces_gradients", "compression", "decentralized", "optimizers")


class AlgorithmState(ABC):
    """One worker's training state; ``step`` per batch, ``end_epoch`` per epoch.

    A concrete algorithm sets ``info`` to its catalogue description; its capabilities are
    read from there, where checking a job reads them without importing the class.
    """

    info: ClassVar[AlgorithmInfo]
    supports_async: ClassVar[bool]
    reduces_gradients: ClassVar[bool]
    compression: ClassVar[CompressionUse]
    decentralized: ClassVar[bool]
    optimizers: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "info" in vars(cls):
            for capability in CAPABILITIES:
                setattr(cls, capability, getattr(cls.info, capability))

    def __init__(
        self,
        spec: AlgorithmSpec,
        model: Model,
        comm: Communicator,
        params: Array,
        sync: SyncProtocol,
    ) -> None:
        self.spec = spec
        self.model = model
        self.comm = comm
        self.params = params
        self.sync = sync
        self.optimizer = make_optimizer(spec)
        self.compute_s = 0.0
        self._loss_sum = 0.0
        self._count = 0.0

    def on_start(self, X: Features, y: Array) -> None:
        """Called once with this worker's whole shard, before the first step."""

    @abstractmethod
    def step(self, X: Features, y: Array) -> None:
        """Train on one batch (possibly empty when this worker's shard ran out)."""

    def end_epoch(self, epoch: int) -> float:
        """Mean training loss over the epoch's batches (of all workers under BSP)."""
        return self._take_loss()

    def finish(self) -> None:
        """After the last epoch: the protocol's last word (ASP merges what is outstanding)."""
        self.params = self.sync.finish(self.params)

    def final_params(self) -> Array:
        """The model this worker ends with (ADMM's is the consensus variable)."""
        return self.params

    def _take_loss(self) -> float:
        loss = self._loss_sum / self._count if self._count else float("nan")
        self._loss_sum = self._count = 0.0
        return loss

    def _gradient(self, X: Features, y: Array) -> tuple[float, Array]:
        """Loss and gradient *sums* of a batch, timed as compute."""
        started = time.perf_counter()
        if len(y) or self.model.gradients_summed_across_workers:
            loss, grad = self.model.loss_grad_sum(self.params, X, y)
        else:
            loss, grad = 0.0, np.zeros_like(self.params)
        self.compute_s += time.perf_counter() - started
        return loss, grad

    def _local_step(self, X: Features, y: Array, extra_grad: Array | None = None) -> None:
        """One optimizer step on this worker's batch alone (MA-SGD, ADMM)."""
        loss, grad = self._gradient(X, y)
        self._loss_sum += loss
        self._count += len(y)
        if not len(y):
            return
        started = time.perf_counter()
        direction = grad / len(y) + self.model.regularizer_grad(self.params)
        if extra_grad is not None:
            direction += extra_grad
        self.optimizer.step(self.params, direction)
        self.compute_s += time.perf_counter() - started

    def _sum_epoch(self, vector: Array) -> tuple[Array, float]:
        """The sum over workers of ``vector`` and the epoch's mean loss, in one collective; resets the tally."""
        stats = np.array([self._count, self._loss_sum], dtype=vector.dtype)
        summed, (count, loss_sum) = self.sync.sum_with(vector, stats)
        self._loss_sum = self._count = 0.0
        return summed, mean_loss(float(loss_sum), float(count))

    def state_dict(self) -> dict[str, Array]:
        """Everything a continued run needs to go on exactly where this one stopped."""
        optimizer = {f"optimizer.{k}": v for k, v in self.optimizer.state_dict().items()}
        prefix = self.sync.checkpoint_prefix
        sync = {f"{prefix}{k}": v for k, v in self.sync.state_dict().items()}
        epoch_stats = np.array([self._loss_sum, self._count])
        return {"params": self.params.copy(), "epoch_stats": epoch_stats, **optimizer, **sync}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        self.params = np.array(state["params"])
        self._loss_sum, self._count = (float(v) for v in state["epoch_stats"])
        self.optimizer.load_state_dict(substate(state, "optimizer."))
        self.sync.load_state_dict(substate(state, self.sync.checkpoint_prefix))


def substate(state: dict[str, Array], prefix: str) -> dict[str, Array]:
    """The entries of ``state`` under ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
