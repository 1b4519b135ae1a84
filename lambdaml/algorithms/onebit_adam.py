"""1-bit Adam: Adam's variance frozen after a warm-up, then compressed momentum averaging."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features
from lambdaml.optim import Adam

if TYPE_CHECKING:
    from lambdaml.config.algorithm import OneBitAdamSpec


class OneBitAdam(AlgorithmState):
    """Tang et al., "1-bit Adam" (2021), on flat parameter vectors.

    Warm-up (``warmup_steps`` steps): plain Adam on the exactly averaged gradient, the
    same as GA-SGD with ``optimizer: adam``. Then the variance is frozen at Adam's
    (bias-corrected) estimate v; each worker updates its momentum with its own gradient,
    m_i = b1 m + (1 - b1) g_i, and the workers average m_i by compressed allreduce with
    error feedback on both sides (1-bit unless ``compression`` says otherwise); then
    x -= lr * m / (sqrt(v) + eps). Coordinates where v is exactly zero had a zero gradient
    on every worker throughout the warm-up (an always-zero input feature, say): they are
    masked out of the momentum and never sent, since a compressor would make their zero
    momentum non-zero and divide it by eps.
    """

    info = catalogue.ALGORITHMS["onebit_adam"]  # Adam whatever the optimizer setting: only momentum is refused
    spec: OneBitAdamSpec

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.optimizer = self.adam = Adam(self.spec.lr)
        self.frozen_v: Array | None = None  # set when the warm-up ends, by _freeze
        # What every compressed step needs of frozen_v, computed once: the kept coordinates (a
        # slice when all are kept, so the steps index nothing) and the preconditioner there.
        self._kept: slice | Array = slice(None)
        self._denominator: Array | None = None

    @property
    def keep(self) -> Array:
        """The coordinates whose momentum is averaged (the mask's complement)."""
        assert self.frozen_v is not None
        return self.frozen_v > 0

    def _freeze(self, v: Array) -> None:
        self.frozen_v = v
        keep = v > 0
        # Sparse data leaves a scattered mask: a boolean index over it costs tens of passes over
        # the vector a step, gathering by index a fraction of one.
        self._kept = slice(None) if keep.all() else np.flatnonzero(keep)
        self._denominator = np.sqrt(v[self._kept]) + self.adam.eps

    def step(self, X: Features, y: Array) -> None:
        loss, grad = self._gradient(X, y)
        stats = np.array([len(y), loss], dtype=grad.dtype)
        if self.frozen_v is None:
            self._warmup_step(grad, stats)
            return
        adam = self.adam
        assert adam.m is not None
        assert self._denominator is not None
        started = time.perf_counter()
        kept = self._kept
        own = grad[kept] / len(y) if len(y) else np.zeros_like(self._denominator)
        momentum = adam.beta1 * adam.m[kept] + (1 - adam.beta1) * (own + self.model.regularizer_grad(self.params)[kept])
        self.compute_s += time.perf_counter() - started
        summed, (count, loss_sum) = self.sync.sum_with(momentum, stats)
        self._count += count
        self._loss_sum += loss_sum
        started = time.perf_counter()
        averaged = summed / self.comm.world_size
        adam.m = np.zeros_like(adam.m)
        adam.m[kept] = averaged
        adam.t += 1
        # Only kept coordinates move: elsewhere m is zero, and so was the update.
        self.params[kept] -= self.spec.lr * averaged / self._denominator
        self.compute_s += time.perf_counter() - started

    def _warmup_step(self, grad: Array, stats: Array) -> None:
        reduced = self.sync.sum(np.concatenate([grad, stats]))  # exact: Adam's variance is not compressed
        count, loss_sum = reduced[-2], reduced[-1]
        self._count += count
        self._loss_sum += loss_sum
        if count == 0:
            return
        started = time.perf_counter()
        self.adam.step(self.params, reduced[:-2] / count + self.model.regularizer_grad(self.params))
        if self.adam.t >= self.spec.warmup_steps:
            assert self.adam.v is not None
            self._freeze(self.adam.v / (1 - self.adam.beta2**self.adam.t))
        self.compute_s += time.perf_counter() - started

    def state_dict(self) -> dict[str, Array]:
        frozen = {} if self.frozen_v is None else {"frozen_v": self.frozen_v.copy()}
        return {**super().state_dict(), **frozen}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        super().load_state_dict(state)
        if "frozen_v" in state:
            self._freeze(np.array(state["frozen_v"]))
        else:
            self.frozen_v, self._denominator = None, None
