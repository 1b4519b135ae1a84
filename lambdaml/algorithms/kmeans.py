"""Distributed KMeans: local assignment, then one reduction of per-cluster sums and counts."""

from __future__ import annotations

import time

import numpy as np

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features, require_dense
from lambdaml.models.kmeans import KMeansModel, initial_centroids


class KMeans(AlgorithmState):
    """Lloyd's iterations over W shards: each epoch is one iteration on all the data.

    Reducing sums *and* counts (not averaging centroids) makes the result equal to
    single-process Lloyd's. Rank 0 picks the initial centroids from its shard and a
    reduction shares them. A cluster that loses every point keeps its centroid.
    """

    info = catalogue.ALGORITHMS["kmeans"]

    def on_start(self, X: Features, y: Array) -> None:
        X = require_dense(X, type(self).__name__)
        assert isinstance(self.model, KMeansModel)
        mine = initial_centroids(X, self.model.k, self.spec.seed) if self.comm.rank == 0 else None
        self.params = self.sync.sum(np.zeros_like(self.params) if mine is None else mine.ravel())
        self._reset()

    def _reset(self) -> None:
        assert isinstance(self.model, KMeansModel)
        self._sums: Array = np.zeros((self.model.k, self.model.n_features))
        self._counts: Array = np.zeros(self.model.k)

    def step(self, X: Features, y: Array) -> None:
        X = require_dense(X, type(self).__name__)
        assert isinstance(self.model, KMeansModel)
        started = time.perf_counter()
        if len(X):
            nearest, distances = self.model.assign(self.params, X)
            np.add.at(self._sums, nearest, np.asarray(X, dtype=np.float64))
            self._counts += np.bincount(nearest, minlength=self.model.k)
            self._loss_sum += float(distances.sum())
            self._count += len(X)
        self.compute_s += time.perf_counter() - started

    def end_epoch(self, epoch: int) -> float:
        assert isinstance(self.model, KMeansModel)
        k, d = self.model.k, self.model.n_features
        reduced, inertia = self._sum_epoch(np.concatenate([self._sums.ravel(), self._counts]))
        sums, counts = reduced[: k * d].reshape(k, d), reduced[k * d :]
        centroids = self.params.reshape(k, d).copy()
        filled = counts > 0
        centroids[filled] = sums[filled] / counts[filled, None]
        self.params = centroids.ravel()
        self._reset()
        return inertia

    def state_dict(self) -> dict[str, Array]:
        return {**super().state_dict(), "sums": self._sums.copy(), "counts": self._counts.copy()}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        super().load_state_dict(state)
        self._sums, self._counts = np.array(state["sums"]), np.array(state["counts"])
