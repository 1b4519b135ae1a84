"""Optimizers on flat numpy parameter vectors, shared by numpy and torch models.

Keeping them in numpy means an algorithm never needs torch to update a model, and their
state (momentum, Adam moments) is plain arrays that checkpoint like the parameters.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.arrays import Array
from lambdaml.registry import Registry

if TYPE_CHECKING:
    from lambdaml.config import AlgorithmSpec


class Optimizer(ABC):
    def __init__(self, lr: float) -> None:
        self.lr = lr

    @abstractmethod
    def step(self, params: Array, grad: Array) -> None:
        """Update ``params`` in place from the (averaged) gradient."""

    def state_dict(self) -> dict[str, Array]:
        return {}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        """Restore what ``state_dict`` returned."""


class SGD(Optimizer):
    def step(self, params: Array, grad: Array) -> None:
        params -= self.lr * grad


class Momentum(Optimizer):
    """Heavy ball: v = mu v + g; x -= lr v."""

    def __init__(self, lr: float, momentum: float = 0.9) -> None:
        super().__init__(lr)
        self.momentum = momentum
        self.velocity: Array | None = None

    def step(self, params: Array, grad: Array) -> None:
        if self.velocity is None:
            self.velocity = np.zeros_like(params)
        self.velocity *= self.momentum
        self.velocity += grad
        params -= self.lr * self.velocity

    def state_dict(self) -> dict[str, Array]:
        return {} if self.velocity is None else {"velocity": self.velocity.copy()}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        self.velocity = np.array(state["velocity"]) if "velocity" in state else None


class Adam(Optimizer):
    """Adam with bias correction (Kingma and Ba)."""

    def __init__(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        super().__init__(lr)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.m: Array | None = None
        self.v: Array | None = None
        self.t = 0

    def step(self, params: Array, grad: Array) -> None:
        if self.m is None or self.v is None:
            self.m, self.v = np.zeros_like(params), np.zeros_like(params)
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        params -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def state_dict(self) -> dict[str, Array]:
        if self.m is None or self.v is None:
            return {"t": np.array(self.t)}
        return {"m": self.m.copy(), "v": self.v.copy(), "t": np.array(self.t)}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        self.m = np.array(state["m"]) if "m" in state else None
        self.v = np.array(state["v"]) if "v" in state else None
        self.t = int(state["t"])


OPTIMIZERS: Registry[type[Optimizer]] = Registry.of("optimizer", catalogue.OPTIMIZERS)


def make_optimizer(spec: AlgorithmSpec) -> Optimizer:
    if spec.optimizer == "momentum":
        return Momentum(spec.lr, spec.momentum)
    return OPTIMIZERS.get(spec.optimizer)(spec.lr)
