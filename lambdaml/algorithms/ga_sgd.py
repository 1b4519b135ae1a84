"""GA-SGD: average the gradient of every mini-batch across workers, then step."""

from __future__ import annotations

import time

import numpy as np

from lambdaml.algorithms.base import AlgorithmState
from lambdaml.data.sparse import Features


class GASGD(AlgorithmState):
    """Gradient averaging every batch: equal to single-process SGD on the concatenated batch.

    Under BSP, workers reduce gradient *sums* together with their batch sizes and loss
    sums in one vector, so unequal batches average exactly and one collective serves all
    three. Under ASP each worker steps on its own gradient and shares the step (Hogwild
    over storage).
    """

    supports_async = True
    reduces_gradients = True

    def step(self, X: Features, y: np.ndarray) -> None:
        if self.asynchronous is not None:
            before = self.params.copy()
            self._local_step(X, y)
            self.params += self.asynchronous.push_pull(self.params - before)
            return
        loss, grad = self._gradient(X, y)
        stats = np.array([len(y), loss], dtype=grad.dtype)
        if self.model.gradients_summed_across_workers:  # DDP summed grad during backward
            reduced = np.concatenate([grad, self.comm.allreduce(stats)])
        else:
            reduced = self.comm.allreduce(np.concatenate([grad, stats]))
        count, loss_sum = reduced[-2], reduced[-1]
        self._count += count
        self._loss_sum += loss_sum
        if count == 0:
            return
        started = time.perf_counter()
        direction = reduced[:-2] / count + self.model.regularizer_grad(self.params)
        self.optimizer.step(self.params, direction)
        self.compute_s += time.perf_counter() - started
