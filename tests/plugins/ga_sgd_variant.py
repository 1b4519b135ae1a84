"""GA-SGD with an inverse-time learning-rate decay: an algorithm plug-in with one hyperparameter of its own.

It lives outside the lambdaml package and reaches it only through the public plug-in entry:
``DESCRIPTION`` names the class and its spec model by path, and a package declares it in the
``lambdaml.plugins`` entry-point group (tests/integration/test_algorithm_plugin.py installs one
that does). With ``decay: 0`` it steps exactly as GA-SGD does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from lambdaml.algorithms.ga_sgd import GASGD
from lambdaml.catalogue import AlgorithmInfo
from lambdaml.config import AlgorithmSpec

if TYPE_CHECKING:
    from lambdaml.arrays import Array
    from lambdaml.data.sparse import Features

NAME = "ga_sgd_decay"

DESCRIPTION = AlgorithmInfo(
    NAME,
    "tests.plugins.ga_sgd_variant:GASGDDecay",
    spec="tests.plugins.ga_sgd_variant:GASGDDecaySpec",
    supports_async=True,
    reduces_gradients=True,
    compression="optional",
)


class GASGDDecaySpec(AlgorithmSpec):
    name: str = NAME
    decay: float = Field(0.0, ge=0, le=1e6)  # the t-th step (from 0) takes lr / (1 + decay * t)


class GASGDDecay(GASGD):
    """GA-SGD whose learning rate decays with the steps taken (empty batches count: every worker
    takes the same steps under BSP, so they all step alike)."""

    info = DESCRIPTION
    spec: GASGDDecaySpec

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.steps = 0

    def step(self, X: Features, y: Array) -> None:
        self.optimizer.lr = self.spec.lr / (1 + self.spec.decay * self.steps)
        super().step(X, y)
        self.steps += 1

    def state_dict(self) -> dict[str, Array]:
        return {**super().state_dict(), "steps": np.array(self.steps)}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        super().load_state_dict(state)
        self.steps = int(state["steps"])
