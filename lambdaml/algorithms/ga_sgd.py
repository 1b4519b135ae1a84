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
    over storage). With ``compression`` it is EF-SGD: the gradient sums travel compressed
    with error feedback on both sides, the batch sizes and losses exactly.
    """

    supports_async = True
    reduces_gradients = True
    compression = "optional"

    def step(self, X: Features, y: np.ndarray) -> None:
        if self.asynchronous is not None:
            before = self.params.copy()
            self._local_step(X, y)
            self.params += self.asynchronous.push_pull(self.params - before)
            return
        loss, grad = self._gradient(X, y)
        stats = np.array([len(y), loss], dtype=grad.dtype)
        if self.model.gradients_summed_across_workers:  # DDP summed the gradient during backward
            summed, (count, loss_sum) = grad, self.comm.allreduce(stats)
        else:
            summed, (count, loss_sum) = self._sum_with(grad, stats)
        self._count += count
        self._loss_sum += loss_sum
        if count == 0:
            return
        started = time.perf_counter()
        direction = summed / count + self.model.regularizer_grad(self.params)
        self.optimizer.step(self.params, direction)
        self.compute_s += time.perf_counter() - started
