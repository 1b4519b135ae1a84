"""Linear models in numpy (the zip-deployable path: no torch)."""

from __future__ import annotations

import numpy as np

from lambdaml.models.base import Model


class LogisticRegression(Model):
    """Binary logistic regression; parameters are the weights followed by the bias.

    Labels above 0 are the positive class, so both {0, 1} and {-1, +1} files work.
    """

    @property
    def n_params(self) -> int:
        return self.n_features + 1

    def init_params(self, seed: int) -> np.ndarray:
        # Zeros: every worker starts from the same point without communicating.
        return np.zeros(self.n_params, dtype=np.float64)

    def labels(self, y: np.ndarray) -> np.ndarray:
        return (y > 0).astype(np.float64)

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = params[:-1], params[-1]
        t = self.labels(y)
        z = X @ w + b
        # log(1 + e^z) - t z, computed stably
        loss = float(np.sum(np.logaddexp(0.0, z) - t * z))
        residual = _sigmoid(z) - t
        grad = np.empty_like(params)
        grad[:-1] = X.T @ residual
        grad[-1] = residual.sum()
        return loss, grad

    def regularizer_grad(self, params: np.ndarray) -> np.ndarray:
        grad = self.l2 * params
        grad[-1] = 0.0  # the bias is not regularized
        return grad

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        return ((X @ params[:-1] + params[-1]) > 0).astype(np.float64)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out = np.empty_like(z, dtype=np.float64)
    positive = z >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-z[positive]))
    ez = np.exp(z[~positive])
    out[~positive] = ez / (1.0 + ez)
    return out
