"""MA-SGD: local SGD for ``local_epochs`` epochs, then average the models."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features

if TYPE_CHECKING:
    from lambdaml.config.algorithm import LocalTrainingSpec


class MASGD(AlgorithmState):
    """Model averaging: one collective per averaging round instead of one per batch.

    Only the weights are averaged (by the protocol: exactly under BSP; under ASP a worker
    pushes 1/W of its local progress and adopts the global model as far as it knows it);
    optimizer state (momentum, Adam moments) stays local to each worker. With
    ``compression`` each worker sends its progress since the last average (x_i - x)
    compressed, with error feedback on both sides.
    """

    info = catalogue.ALGORITHMS["ma_sgd"]
    spec: LocalTrainingSpec

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._base = self.params.copy()  # the global model this worker's local run started from

    def step(self, X: Features, y: Array) -> None:
        self._local_step(X, y)

    def end_epoch(self, epoch: int) -> float:
        last = epoch + 1 == self.spec.epochs
        if (epoch + 1) % self.spec.local_epochs and not last:
            return self._take_loss()  # a local epoch: the loss is this worker's
        averaged, loss = self.sync.average(self.params, self._base, self._count, self._loss_sum)
        self.params, self._base = averaged, averaged.copy()
        self._loss_sum = self._count = 0.0
        return loss

    def state_dict(self) -> dict[str, Array]:
        return {**super().state_dict(), "base": self._base.copy()}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        super().load_state_dict(state)
        self._base = np.array(state["base"])
