"""The algorithm interface: hooks the worker loop calls, and a checkpointable state.

The hyperparameters are a frozen, validated ``AlgorithmSpec``; ``reify`` turns them into
the mutable state one worker trains with (the BAGUA split of configuration from state).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from lambdaml.optim import make_optimizer

if TYPE_CHECKING:
    from lambdaml.comm.base import Communicator
    from lambdaml.config import AlgorithmSpec
    from lambdaml.models.base import Model


class AlgorithmState(ABC):
    """One worker's training state; ``step`` per batch, ``end_epoch`` per epoch."""

    def __init__(self, spec: AlgorithmSpec, model: Model, comm: Communicator, params: np.ndarray) -> None:
        self.spec = spec
        self.model = model
        self.comm = comm
        self.params = params
        self.optimizer = make_optimizer(spec)
        self.compute_s = 0.0
        self._loss_sum = 0.0
        self._count = 0.0

    @abstractmethod
    def step(self, X: np.ndarray, y: np.ndarray) -> None:
        """Train on one batch (possibly empty when this worker's shard ran out)."""

    def end_epoch(self) -> float:
        """Mean training loss over the epoch's batches of all workers (before each update)."""
        loss = self._loss_sum / self._count if self._count else float("nan")
        self._loss_sum = self._count = 0.0
        return loss

    def _gradient(self, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        started = time.perf_counter()
        if len(y):
            loss, grad = self.model.loss_grad_sum(self.params, X, y)
        else:
            loss, grad = 0.0, np.zeros_like(self.params)
        self.compute_s += time.perf_counter() - started
        return loss, grad

    def state_dict(self) -> dict[str, np.ndarray]:
        optimizer = {f"optimizer.{k}": v for k, v in self.optimizer.state_dict().items()}
        return {"params": self.params.copy(), **optimizer}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.params = np.array(state["params"])
        prefix = "optimizer."
        self.optimizer.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})


def reify(spec: AlgorithmSpec, model: Model, comm: Communicator, params: np.ndarray) -> AlgorithmState:
    """Build the runtime state of the algorithm a spec names."""
    from lambdaml.algorithms import ALGORITHMS

    return ALGORITHMS.get(spec.name)(spec, model, comm, params)
