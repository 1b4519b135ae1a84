"""The model interface the training loop needs: flat parameters, loss and gradient sums."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features
from lambdaml.errors import ConfigError, DataError

if TYPE_CHECKING:
    from lambdaml.config import ModelSpec
    from lambdaml.data.shards import Manifest


class Model(ABC):
    """A model whose parameters are one flat vector, so collectives move one array.

    Losses and gradients are returned as *sums* over the batch, not means, so that the
    reduction across workers of unequal batches is exact: sum the sums, divide by the
    summed count.
    """

    #: Whether labels mean anything to the model (accuracy is reported only then).
    supervised: bool = True
    #: True once a communicator sums gradients inside backward (DDP): ``loss_grad_sum``'s
    #: gradient is then the sum over every worker's batch, and must run on empty batches too.
    gradients_summed_across_workers: bool = False

    def __init__(self, n_features: int, *, l2: float = 0.0) -> None:
        self.n_features = n_features
        self.l2 = l2

    @classmethod
    def build(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        """The model a job's spec names, shaped for the dataset the manifest describes."""
        cls.check_dataset(spec.name, manifest)
        return cls(manifest.n_features, l2=spec.l2)

    @classmethod
    def check_dataset(cls, name: str, manifest: Manifest) -> None:
        """Refuse, with one ``ConfigError`` line, a dataset model ``name`` cannot learn.

        A binary model on more than two classes is refused (the catalogue says which are
        binary). The driver checks this before any worker starts; ``build`` checks it again,
        for whoever builds a model directly.
        """
        catalogue.model(name).check_classes(manifest.name, manifest.n_classes)

    @property
    @abstractmethod
    def n_params(self) -> int: ...

    @abstractmethod
    def init_params(self, seed: int) -> Array: ...

    @abstractmethod
    def loss_grad_sum(self, params: Array, X: Features, y: Array) -> tuple[float, Array]:
        """Sum over the batch of the data loss, and of its gradient."""

    @abstractmethod
    def regularizer_grad(self, params: Array) -> Array:
        """Gradient of the regularizer, added once to the averaged data gradient."""

    def biases(self) -> slice:
        """The parameters regularizers leave alone (l2 here, ADMM's l1): the trailing bias by default."""
        return slice(self.n_params - 1, self.n_params)

    @abstractmethod
    def predict(self, params: Array, X: Features) -> Array: ...

    def decision(self, params: Array, X: Features) -> Array:
        """The scores ``predict`` thresholds or takes the largest of: margins (binary) or one column per class."""
        raise ConfigError(f"model {catalogue_name(self)!r} has no decision function")

    def probabilities(self, params: Array, X: Features) -> Array:
        """One column per class, each row summing to 1; only models with a probabilistic loss have them."""
        raise ConfigError(f"model {catalogue_name(self)!r} gives no probabilities (its loss is not a likelihood)")

    def mean_loss(self, params: Array, X: Features, y: Array) -> float:
        if len(y) == 0:
            return float("nan")
        loss, _ = self.loss_grad_sum(params, X, y)
        return loss / len(y)

    def accuracy(self, params: Array, X: Features, y: Array) -> float:
        if len(y) == 0:
            return float("nan")
        return float(np.mean(self.predict(params, X) == self.labels(y)))

    def labels(self, y: Array) -> Array:
        return y


def class_ids(y: Array, n_classes: int, model: str) -> Array:
    """Labels as int64 class ids 0..n_classes-1: the one rule every classifier reads its labels by.

    A label that is not one of those ids (2.5, -1, NaN, a regression target's 0.4) is a
    DataError naming it: cast to an integer it would silently become another class.
    """
    y = np.asarray(y)
    bad = ~np.isin(y, np.arange(n_classes))
    if bad.any():
        raise DataError(
            f"model {model!r} needs class labels 0..{n_classes - 1}; found {float(y[bad][0]):g} "
            f"({int(bad.sum())} of {len(y)} labels): are they a regression target?"
        )
    return y.astype(np.int64)


def catalogue_name(model: Model) -> str:
    """The name a job file gives ``model``'s class (``lr``, ``softmax``, ``mlp`` ...)."""
    path = f"{type(model).__module__}:{type(model).__name__}"
    return next((info.name for info in catalogue.MODELS.values() if info.path == path), type(model).__name__)
