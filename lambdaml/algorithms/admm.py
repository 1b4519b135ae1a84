"""Consensus ADMM, as in LambdaML: local steps on an augmented loss, then average."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features

if TYPE_CHECKING:
    from lambdaml.config.algorithm import ADMMSpec


class ADMM(AlgorithmState):
    """Scaled-form consensus ADMM.

    Each worker runs ``local_epochs`` passes of SGD on f_i(x) + (rho/2)||x - z + u_i||^2,
    then z = average(x_i + u_i) (soft-thresholded by l1/(rho W) when ``l1`` > 0; the bias
    is never thresholded) and u_i += x_i - z. The model is z, identical on every worker.
    """

    info = catalogue.ALGORITHMS["admm"]
    spec: ADMMSpec

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.z = self.params.copy()
        self.u = np.zeros_like(self.params)

    def step(self, X: Features, y: Array) -> None:
        self._local_step(X, y, extra_grad=self.spec.rho * (self.params - self.z + self.u))

    def end_epoch(self, epoch: int) -> float:
        last = epoch + 1 == self.spec.epochs
        if (epoch + 1) % self.spec.local_epochs and not last:
            return self._take_loss()
        world = self.comm.world_size
        summed, loss = self._sum_epoch(self.params + self.u)
        z = summed / world
        if self.spec.l1 > 0:
            threshold = self.spec.l1 / (self.spec.rho * world)
            weights = np.ones(z.size, dtype=bool)
            weights[self.model.biases()] = False  # biases are not shrunk (a multiclass model has one per class)
            z[weights] = np.sign(z[weights]) * np.maximum(np.abs(z[weights]) - threshold, 0.0)
        self.z = z
        self.u += self.params - self.z
        return loss

    def final_params(self) -> Array:
        return self.z

    def state_dict(self) -> dict[str, Array]:
        return {**super().state_dict(), "z": self.z.copy(), "u": self.u.copy()}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        super().load_state_dict(state)
        self.z, self.u = np.array(state["z"]), np.array(state["u"])
