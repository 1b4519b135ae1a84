"""Distributed training algorithms: configuration (AlgorithmSpec) reified into runtime state."""

from __future__ import annotations

from lambdaml.algorithms.base import AlgorithmState, reify
from lambdaml.registry import Registry

ALGORITHMS: Registry[type[AlgorithmState]] = Registry("algorithm")
ALGORITHMS.register("ga_sgd", "lambdaml.algorithms.ga_sgd:GASGD")
ALGORITHMS.register("ma_sgd", "lambdaml.algorithms.ma_sgd:MASGD")
ALGORITHMS.register("admm", "lambdaml.algorithms.admm:ADMM")
ALGORITHMS.register("kmeans", "lambdaml.algorithms.kmeans:KMeans")
ALGORITHMS.register("onebit_adam", "lambdaml.algorithms.onebit_adam:OneBitAdam")
ALGORITHMS.register("dpsgd", "lambdaml.algorithms.decentralized:DPSGD")
ALGORITHMS.register("dcd_psgd", "lambdaml.algorithms.decentralized:DCDPSGD")
ALGORITHMS.register("ecd_psgd", "lambdaml.algorithms.decentralized:ECDPSGD")
ALGORITHMS.register("choco_sgd", "lambdaml.algorithms.decentralized:CHOCOSGD")

__all__ = ["ALGORITHMS", "AlgorithmState", "reify"]
