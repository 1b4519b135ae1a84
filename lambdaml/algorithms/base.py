"""The algorithm interface: hooks the worker loop calls, and a checkpointable state.

The hyperparameters are a frozen, validated ``AlgorithmSpec``; ``reify`` turns them into
the mutable state one worker trains with (the BAGUA split of configuration from state).
Under BSP an algorithm reduces through the communicator's collectives; under ASP/SSP it
pushes additive updates through ``self.asynchronous`` instead.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from lambdaml.data.sparse import Features
from lambdaml.optim import make_optimizer

if TYPE_CHECKING:
    from lambdaml.comm.base import Communicator
    from lambdaml.config import AlgorithmSpec, SyncSpec
    from lambdaml.models.base import Model
    from lambdaml.sync.asp import AsyncUpdates


class AlgorithmState(ABC):
    """One worker's training state; ``step`` per batch, ``end_epoch`` per epoch."""

    #: Whether the algorithm has an ASP/SSP form (consensus methods such as ADMM do not).
    supports_async: ClassVar[bool] = False
    #: Whether every step sums gradients over workers (GA-SGD): DDP can then do it in backward.
    reduces_gradients: ClassVar[bool] = False

    def __init__(
        self,
        spec: AlgorithmSpec,
        model: Model,
        comm: Communicator,
        params: np.ndarray,
        asynchronous: AsyncUpdates | None = None,
    ) -> None:
        self.spec = spec
        self.model = model
        self.comm = comm
        self.params = params
        self.asynchronous = asynchronous
        self.optimizer = make_optimizer(spec)
        self.compute_s = 0.0
        self._loss_sum = 0.0
        self._count = 0.0

    def on_start(self, X: Features, y: np.ndarray) -> None:
        """Called once with this worker's whole shard, before the first step."""

    @abstractmethod
    def step(self, X: Features, y: np.ndarray) -> None:
        """Train on one batch (possibly empty when this worker's shard ran out)."""

    def end_epoch(self, epoch: int) -> float:
        """Mean training loss over the epoch's batches (of all workers under BSP)."""
        return self._take_loss()

    def finish(self) -> None:
        """After the last epoch: under ASP, merge every update still outstanding."""
        if self.asynchronous is not None:
            self.params += self.asynchronous.drain(self.params)

    def final_params(self) -> np.ndarray:
        """The model this worker ends with (ADMM's is the consensus variable)."""
        return self.params

    def _take_loss(self) -> float:
        loss = self._loss_sum / self._count if self._count else float("nan")
        self._loss_sum = self._count = 0.0
        return loss

    def _gradient(self, X: Features, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and gradient *sums* of a batch, timed as compute."""
        started = time.perf_counter()
        if len(y) or self.model.gradients_summed_across_workers:
            loss, grad = self.model.loss_grad_sum(self.params, X, y)
        else:
            loss, grad = 0.0, np.zeros_like(self.params)
        self.compute_s += time.perf_counter() - started
        return loss, grad

    def _local_step(self, X: Features, y: np.ndarray, extra_grad: np.ndarray | None = None) -> None:
        """One optimizer step on this worker's batch alone (MA-SGD, ADMM, ASP GA-SGD)."""
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

    def _with_stats(self, vector: np.ndarray) -> np.ndarray:
        """``vector`` followed by this epoch's sample count and loss sum, for one collective."""
        return np.concatenate([vector, np.array([self._count, self._loss_sum], dtype=vector.dtype)])

    def _split_stats(self, reduced: np.ndarray) -> tuple[np.ndarray, float]:
        """Undo ``_with_stats`` after a sum over ranks; returns the vector and the mean loss."""
        count, loss_sum = float(reduced[-2]), float(reduced[-1])
        self._loss_sum = self._count = 0.0
        return reduced[:-2], (loss_sum / count if count else float("nan"))

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything a continued run needs to go on exactly where this one stopped."""
        optimizer = {f"optimizer.{k}": v for k, v in self.optimizer.state_dict().items()}
        epoch_stats = np.array([self._loss_sum, self._count])
        asynchronous = {} if self.asynchronous is None else self.asynchronous.state_dict()
        asp = {f"asp.{k}": v for k, v in asynchronous.items()}
        return {"params": self.params.copy(), "epoch_stats": epoch_stats, **optimizer, **asp}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.params = np.array(state["params"])
        self._loss_sum, self._count = (float(v) for v in state["epoch_stats"])
        prefix = "optimizer."
        self.optimizer.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
        if self.asynchronous is not None:
            self.asynchronous.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("asp.")})


def reify(
    spec: AlgorithmSpec, model: Model, comm: Communicator, params: np.ndarray, sync: SyncSpec | None = None
) -> AlgorithmState:
    """Build the runtime state of the algorithm a spec names, under the sync protocol asked for."""
    from lambdaml.algorithms import ALGORITHMS

    asynchronous = None
    if sync is not None and sync.protocol != "bsp":
        from lambdaml.comm.channel import ChannelCommunicator
        from lambdaml.sync.asp import AsyncUpdates

        if not isinstance(comm, ChannelCommunicator):
            raise TypeError("ASP and SSP run over a channel communicator")
        asynchronous = AsyncUpdates(comm, staleness=sync.staleness if sync.protocol == "ssp" else None)
    return ALGORITHMS.get(spec.name)(spec, model, comm, params, asynchronous)
