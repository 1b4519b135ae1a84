"""Multiclass linear models in numpy (zip-deployable, no torch), on dense or CSR features.

Softmax regression and the Crammer-Singer SVM differ only in the loss of the score
matrix ``S = X @ W + b`` (one column per class); the base class does the rest once, as
``LinearModel`` does for the binary LR and SVM. ``X`` is used only through ``X @ W`` and
``X.T @ R``, so a dense array and a ``CSRMatrix`` work alike.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.sparse import Features
from lambdaml.errors import ConfigError
from lambdaml.models.base import Model, class_ids

if TYPE_CHECKING:
    from lambdaml.config import ModelSpec
    from lambdaml.data.shards import Manifest


class MulticlassLinearModel(Model):
    """A linear classifier over C classes; parameters are W (n_features x C, row-major), then C biases.

    Labels are class ids 0..C-1 (stored as floats); anything else is a ``DataError``.
    Two classes (C = 2) work as well as ten.
    """

    name: ClassVar[str] = "multiclass"  # the registry name, used in messages

    def __init__(self, n_features: int, *, n_classes: int, l2: float = 0.0) -> None:
        super().__init__(n_features, l2=l2)
        if n_classes < 2:
            raise ConfigError(f"model {self.name!r} needs at least 2 classes; the dataset has {n_classes}")
        self.n_classes = n_classes

    @classmethod
    def build(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        return cls(manifest.n_features, n_classes=manifest.n_classes, l2=spec.l2)

    @property
    def n_params(self) -> int:
        return (self.n_features + 1) * self.n_classes

    def init_params(self, seed: int) -> Array:
        # Zeros: every worker starts from the same point without communicating.
        return np.zeros(self.n_params, dtype=np.float64)

    def classes(self, y: Array) -> Array:
        """Labels as int64 class ids, refusing non-integral or out-of-range ones with one line."""
        return class_ids(y, self.n_classes, self.name)

    def labels(self, y: Array) -> Array:
        return self.classes(y).astype(np.float64)

    def scores(self, params: Array, X: Features) -> Array:
        """``X @ W + b``: one row per example, one column per class (float64)."""
        weights = params[: -self.n_classes].reshape(self.n_features, self.n_classes)
        return np.asarray(X @ weights, dtype=np.float64) + params[-self.n_classes :]

    def decision(self, params: Array, X: Features) -> Array:
        return self.scores(params, X)

    @abstractmethod
    def loss_and_slopes(self, S: Array, t: Array) -> tuple[float, Array]:
        """Summed loss of scores ``S`` for class ids ``t``, and its derivative by every score."""

    def loss_grad_sum(self, params: Array, X: Features, y: Array) -> tuple[float, Array]:
        loss, R = self.loss_and_slopes(self.scores(params, X), self.classes(y))
        grad = np.empty_like(params)
        grad[: -self.n_classes] = np.asarray(X.T @ R, dtype=np.float64).reshape(-1)
        grad[-self.n_classes :] = R.sum(axis=0)
        return loss, grad

    def regularizer_grad(self, params: Array) -> Array:
        grad = self.l2 * params
        grad[self.biases()] = 0.0  # the biases are not regularized
        return grad

    def biases(self) -> slice:
        return slice(self.n_params - self.n_classes, self.n_params)

    def predict(self, params: Array, X: Features) -> Array:
        """The class of the highest score, as a float64 id (compared with ``labels(y)``)."""
        classes: Array = np.argmax(self.scores(params, X), axis=1).astype(np.float64)
        return classes


class SoftmaxRegression(MulticlassLinearModel):
    """Multinomial logistic regression: ``logsumexp(s_i) - s_i,y_i`` summed over the batch."""

    name = "softmax"

    def loss_and_slopes(self, S: Array, t: Array) -> tuple[float, Array]:
        rows = np.arange(len(t))
        shifted = S - S.max(axis=1, keepdims=True)  # log-sum-exp shift: no exp overflows
        exp = np.exp(shifted)
        total = exp.sum(axis=1)
        loss = float(np.sum(np.log(total) - shifted[rows, t]))
        slopes = exp / total[:, None]
        slopes[rows, t] -= 1.0
        return loss, slopes

    def probabilities(self, params: Array, X: Features) -> Array:
        return softmax_rows(self.scores(params, X))


class MulticlassSVM(MulticlassLinearModel):
    """Crammer-Singer multiclass SVM: ``max(0, 1 + max_{j != y} s_j - s_y)`` per example.

    The hinge is not differentiable at 0; the subgradient used there is 0 (as the binary
    SVM's). Ties among the rival classes go to the lowest class id.
    """

    name = "multiclass_svm"

    def loss_and_slopes(self, S: Array, t: Array) -> tuple[float, Array]:
        rows = np.arange(len(t))
        own = S[rows, t]
        rivals = S.copy()
        rivals[rows, t] = -np.inf
        rival = np.argmax(rivals, axis=1)
        slack = 1.0 + rivals[rows, rival] - own
        active = slack > 0
        slopes = np.zeros_like(S)
        slopes[rows[active], rival[active]] = 1.0
        slopes[rows[active], t[active]] = -1.0
        return float(np.sum(slack[active])), slopes


def softmax_rows(S: Array) -> Array:
    """Each row's softmax, shifted so no exponential overflows."""
    exp = np.exp(S - S.max(axis=1, keepdims=True))
    out: Array = exp / exp.sum(axis=1, keepdims=True)
    return out
