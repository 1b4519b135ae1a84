"""Linear models in numpy (the zip-deployable path: no torch), on dense or CSR features.

LR and SVM differ only in the loss of the margin ``z = X @ w + b``; the base class does
the rest once. ``X`` is used only through ``X @ w`` and ``X.T @ r``, so a dense array and
a ``CSRMatrix`` work alike.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.sparse import Features
from lambdaml.models.base import Model, catalogue_name, class_ids


class LinearModel(Model):
    """A binary linear classifier; parameters are the weights followed by the bias.

    Labels above 0 are the positive class, so both {0, 1} and {-1, +1} files work. More
    than two classes are refused at ``build`` (see ``lambdaml.models.multiclass``).
    """

    @property
    def n_params(self) -> int:
        return self.n_features + 1

    def init_params(self, seed: int) -> Array:
        # Zeros: every worker starts from the same point without communicating.
        return np.zeros(self.n_params, dtype=np.float64)

    def labels(self, y: Array) -> Array:
        """Class ids 0 and 1; a {-1, +1} file's labels are read as such, anything else refused (``class_ids``)."""
        y = np.asarray(y)
        if np.all((y == -1.0) | (y == 1.0)):
            return (y > 0).astype(np.float64)
        return class_ids(y, 2, catalogue_name(self)).astype(np.float64)

    def margin(self, params: Array, X: Features) -> Array:
        """``X @ w + b`` for every row (float64)."""
        margin: Array = np.asarray(X @ params[:-1], dtype=np.float64) + params[-1]
        return margin

    @abstractmethod
    def loss_and_slope(self, z: Array, t: Array) -> tuple[float, Array]:
        """Summed loss of margins ``z`` for labels ``t`` in {0, 1}, and its derivative per row."""

    def loss_grad_sum(self, params: Array, X: Features, y: Array) -> tuple[float, Array]:
        loss, slope = self.loss_and_slope(self.margin(params, X), self.labels(y))
        grad = np.empty_like(params)
        grad[:-1] = X.T @ slope
        grad[-1] = slope.sum()
        return loss, grad

    def regularizer_grad(self, params: Array) -> Array:
        grad = self.l2 * params
        grad[self.biases()] = 0.0  # the bias is not regularized
        return grad

    def decision(self, params: Array, X: Features) -> Array:
        return self.margin(params, X)

    def predict(self, params: Array, X: Features) -> Array:
        """Class 1 where the margin is positive, else 0 (compared with ``labels(y)``)."""
        return (self.margin(params, X) > 0).astype(np.float64)


class LogisticRegression(LinearModel):
    """Binary logistic regression: ``log(1 + e^z) - t z`` summed over the batch."""

    def loss_and_slope(self, z: Array, t: Array) -> tuple[float, Array]:
        loss = float(np.sum(np.logaddexp(0.0, z) - t * z))  # stable for any z
        return loss, _sigmoid(z) - t

    def probabilities(self, params: Array, X: Features) -> Array:
        positive = _sigmoid(self.margin(params, X))
        return np.column_stack([1.0 - positive, positive])


class LinearSVM(LinearModel):
    """Linear SVM: hinge loss ``max(0, 1 - s z)`` with ``s = +1`` for positive labels, ``-1`` otherwise.

    The hinge is not differentiable at ``s z = 1``; the subgradient used there is 0.
    """

    def loss_and_slope(self, z: Array, t: Array) -> tuple[float, Array]:
        s = 2.0 * t - 1.0
        slack = 1.0 - s * z
        active = slack > 0
        return float(np.sum(slack[active])), np.where(active, -s, 0.0)


def _sigmoid(z: Array) -> Array:
    out = np.empty_like(z, dtype=np.float64)
    positive = z >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-z[positive]))
    ez = np.exp(z[~positive])
    out[~positive] = ez / (1.0 + ez)
    return out
