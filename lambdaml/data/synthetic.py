"""Synthetic datasets with a known ground truth, for tests, demos and benchmarks."""

from __future__ import annotations

import numpy as np

HIGGS_FEATURES = 28


def higgs_like(
    rows: int, *, seed: int = 0, features: int = HIGGS_FEATURES, noise: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Higgs-shaped binary classification: 28 features, labels from a known linear model.

    The label is ``1[x . w + b + noise * logistic > 0]``, so logistic regression is the
    right model and its best accuracy is set by ``noise``. Returns ``X, y, w_true``
    (``w_true`` holds the weights followed by the bias).
    """
    rng = np.random.default_rng(seed)
    w_true = rng.normal(0.0, 1.0, size=features + 1)
    # Higgs' features are a mix of symmetric and skewed (positive) quantities.
    X = rng.normal(0.0, 1.0, size=(rows, features))
    skewed = slice(0, features // 3)
    X[:, skewed] = np.abs(X[:, skewed]) * 1.5
    logits = X @ w_true[:-1] + w_true[-1]
    y = (logits + noise * rng.logistic(size=rows) > 0).astype(np.float32)
    return X.astype(np.float32), y, w_true
