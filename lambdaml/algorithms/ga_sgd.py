"""GA-SGD: average the gradient of every mini-batch across workers, then step."""

from __future__ import annotations

import time

import numpy as np

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features


class GASGD(AlgorithmState):
    """Gradient averaging every batch: equal to single-process SGD on the concatenated batch.

    The protocol gives the gradient to step on: under BSP the workers' gradient *sums*,
    reduced together with their batch sizes and loss sums in one collective, so unequal
    batches average exactly; under ASP this worker's own, the step then shared (Hogwild
    over storage). With ``compression`` it is EF-SGD: the gradient sums travel compressed
    with error feedback on both sides, the batch sizes and losses exactly.
    """

    info = catalogue.ALGORITHMS["ga_sgd"]

    def step(self, X: Features, y: Array) -> None:
        loss, grad = self._gradient(X, y)
        with self.sync.sharing(self.params):  # ASP: the step taken here goes to the others
            if self.model.gradients_summed_across_workers:  # DDP summed the gradient during backward
                summed, (count, loss_sum) = grad, self.sync.sum(np.array([len(y), loss], dtype=grad.dtype))
            else:
                summed, count, loss_sum = self.sync.gradients(grad, len(y), loss)
            self._count += count
            self._loss_sum += loss_sum
            if count == 0:
                return
            started = time.perf_counter()
            direction = summed / count + self.model.regularizer_grad(self.params)
            self.optimizer.step(self.params, direction)
            self.compute_s += time.perf_counter() - started
