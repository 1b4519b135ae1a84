"""Distributed training algorithms: configuration (AlgorithmSpec) reified into runtime state."""

from __future__ import annotations

from lambdaml.algorithms.base import AlgorithmState, reify
from lambdaml.registry import Registry

ALGORITHMS: Registry[type[AlgorithmState]] = Registry("algorithm")
ALGORITHMS.register("ga_sgd", "lambdaml.algorithms.ga_sgd:GASGD")
ALGORITHMS.register("ma_sgd", "lambdaml.algorithms.ma_sgd:MASGD")
ALGORITHMS.register("admm", "lambdaml.algorithms.admm:ADMM")
ALGORITHMS.register("kmeans", "lambdaml.algorithms.kmeans:KMeans")

__all__ = ["ALGORITHMS", "AlgorithmState", "reify"]
