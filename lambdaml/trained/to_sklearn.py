"""A trained model as a fitted scikit-learn estimator, built from its parameters (no pickle, no refit).

LR becomes ``LogisticRegression``, softmax a multinomial ``LogisticRegression``, the SVMs
``LinearSVC`` (Crammer-Singer for multiclass) and KMeans ``KMeans``; their ``predict`` is the
trained model's, and LR's and softmax's ``predict_proba`` agree to float rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.trained.exportable import Exportable

INSTALL_HINT = "pip install scikit-learn"


def to_sklearn(trained: Exportable) -> Any:
    try:
        from sklearn.cluster import KMeans
        from sklearn.linear_model import LogisticRegression
        from sklearn.svm import LinearSVC
    except ImportError:
        raise ConfigError(f"to_sklearn needs scikit-learn: {INSTALL_HINT}") from None
    coef: Any
    intercept: Any
    d, params = trained.n_features, np.asarray(trained.params, dtype=np.float64)
    name = trained.name
    if name == "kmeans":
        k = params.size // d
        estimator: Any = KMeans(n_clusters=k, n_init=1)
        estimator.cluster_centers_ = params.reshape(k, d).copy()
        estimator.labels_ = np.zeros(0, dtype=np.int32)
        estimator.inertia_ = float("nan")
        estimator.n_iter_ = 0
        estimator._n_threads = 1
        estimator._n_features_out = k
        estimator.n_features_in_ = d
        return estimator
    if name in ("lr", "svm"):  # weights then the bias
        coef, intercept = params[:-1].reshape(1, d), params[-1:].copy()
    elif name in ("softmax", "multiclass_svm"):  # W (d x C, row-major) then C biases
        c = trained.card.n_classes
        coef, intercept = params[:-c].reshape(d, c).T.copy(), params[-c:].copy()
        if c == 2:  # scikit-learn's binary form: one row, the score of class 1 less that of class 0
            coef, intercept = coef[1:] - coef[:1], intercept[1:] - intercept[:1]
    else:
        raise ConfigError(f"model {name!r} has no scikit-learn counterpart; use to_torch() or to_onnx()")
    if name in ("lr", "softmax"):
        estimator = LogisticRegression()
    else:
        estimator = LinearSVC(multi_class="crammer_singer" if name == "multiclass_svm" else "ovr")
    estimator.coef_, estimator.intercept_ = coef, intercept
    estimator.classes_ = trained.classes_
    estimator.n_features_in_ = d
    estimator.n_iter_ = np.zeros(1, dtype=np.int32)
    return estimator


__all__ = ["to_sklearn"]
