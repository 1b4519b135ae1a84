"""KMeans as a model: the parameters are the k centroids, flattened."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.sparse import Features, require_dense
from lambdaml.errors import ConfigError
from lambdaml.models.base import Model

if TYPE_CHECKING:
    from lambdaml.config import ModelSpec
    from lambdaml.data.shards import Manifest


def initial_centroids(X: Array, k: int, seed: int) -> Array:
    """k-means++ seeding on the given rows, reproducible from the seed, as float64.

    Each next centroid is drawn with probability proportional to the squared distance
    to the nearest one chosen so far, which avoids most of Forgy's bad local optima.
    """
    if len(X) < k:
        raise ConfigError(f"kmeans: k={k} is more than the {len(X)} rows rank 0 holds")
    rng = np.random.default_rng(seed)
    points = np.asarray(X, dtype=np.float64)
    chosen = [int(rng.integers(len(points)))]
    nearest = ((points - points[chosen[0]]) ** 2).sum(axis=1)
    for _ in range(1, k):
        total = nearest.sum()
        index = int(rng.choice(len(points), p=nearest / total)) if total > 0 else int(rng.integers(len(points)))
        chosen.append(index)
        nearest = np.minimum(nearest, ((points - points[index]) ** 2).sum(axis=1))
    return points[chosen].copy()


class KMeansModel(Model):
    """Centroids of k clusters; the "loss" is the mean squared distance to the nearest one."""

    supervised = False

    def __init__(self, n_features: int, *, k: int = 8, l2: float = 0.0) -> None:
        super().__init__(n_features, l2=l2)
        self.k = k

    @classmethod
    def build(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        return cls(manifest.n_features, k=spec.k)

    @property
    def n_params(self) -> int:
        return self.k * self.n_features

    def init_params(self, seed: int) -> Array:
        return np.zeros(self.n_params)  # the algorithm picks centroids from the data

    def assign(self, params: Array, X: Features) -> tuple[Array, Array]:
        """Nearest centroid of each row and the squared distance to it."""
        X = require_dense(X, type(self).__name__)
        centroids = params.reshape(self.k, self.n_features)
        X64 = np.asarray(X, dtype=np.float64)
        squared = (X64 * X64).sum(axis=1)[:, None] - 2.0 * X64 @ centroids.T + (centroids * centroids).sum(axis=1)
        nearest = np.argmin(squared, axis=1)
        return nearest, np.maximum(squared[np.arange(len(X64)), nearest], 0.0)

    def loss_grad_sum(self, params: Array, X: Features, y: Array) -> tuple[float, Array]:
        X = require_dense(X, type(self).__name__)
        _, distances = self.assign(params, X)
        return float(distances.sum()), np.zeros_like(params)

    def regularizer_grad(self, params: Array) -> Array:
        return np.zeros_like(params)

    def predict(self, params: Array, X: Features) -> Array:
        X = require_dense(X, type(self).__name__)
        return self.assign(params, X)[0]
