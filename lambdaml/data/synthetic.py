"""Synthetic datasets with a known ground truth, for tests, demos and benchmarks."""

from __future__ import annotations

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.sparse import CSRMatrix
from lambdaml.errors import DataError

HIGGS_FEATURES = 28


def higgs_like(
    rows: int, *, seed: int = 0, features: int = HIGGS_FEATURES, noise: float = 1.0
) -> tuple[Array, Array, Array]:
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


RCV1_FEATURES = 47_236


def rcv1_like(
    rows: int,
    *,
    features: int = RCV1_FEATURES,
    nnz_per_row: int = 75,
    seed: int = 0,
    noise: float = 0.1,
    informative: float = 0.05,
) -> tuple[CSRMatrix, Array, Array]:
    """RCV1-shaped sparse binary classification, built without a dense matrix.

    Like RCV1's tf-idf rows: about ``nnz_per_row`` positive values per row over a Zipf-like
    vocabulary (a few columns are common, most are rare), each row scaled to unit l2 norm.
    Labels come from a sparse ground-truth linear model on the ``informative`` fraction of
    the columns (chosen among the common ones, so a few thousand rows suffice to learn
    it), with the bias set for balanced classes and logistic label noise of ``noise``
    times the margin's spread. Returns ``X, y, w_true`` (weights followed by the bias).
    """
    if rows < 1 or features < 1 or nnz_per_row < 1:
        raise DataError(
            f"rcv1_like needs positive rows, features and nnz_per_row, got {rows}, {features}, {nnz_per_row}"
        )
    rng = np.random.default_rng(seed)
    popularity = 1.0 / (np.arange(features) + 10.0)  # Zipf-like word frequencies, by rank
    popularity /= popularity.sum()
    vocabulary = rng.permutation(features)  # column of the word of each rank
    counts = np.maximum(1, rng.poisson(nnz_per_row, size=rows))
    row_of = np.repeat(np.arange(rows, dtype=np.int64), counts)
    ranks = rng.choice(features, size=len(row_of), p=popularity)
    # tf-idf-like values: a repeated word adds up, rare words weigh more
    values = rng.lognormal(0.0, 0.5, size=len(row_of)) * -np.log(popularity[ranks])
    X = CSRMatrix.from_coo(row_of, vocabulary[ranks], values, (rows, features))
    norms = np.sqrt(np.bincount(X.row_ids(), weights=X.data.astype(np.float64) ** 2, minlength=rows))
    X = CSRMatrix(X.indptr, X.indices, X.data / norms[X.row_ids()], X.shape, check=False)  # every row has a value

    w_true = np.zeros(features + 1)
    n_informative = max(1, round(informative * features))
    support = vocabulary[np.sort(rng.choice(features, size=n_informative, replace=False, p=popularity))]
    w_true[support] = rng.normal(0.0, 1.0, size=n_informative)
    margin = X @ w_true[:-1]
    w_true[-1] = -float(np.median(margin))
    margin += w_true[-1]
    spread = float(np.std(margin)) or 1.0
    y = (margin + noise * spread * rng.logistic(size=rows) > 0).astype(np.float32)
    return X, y, w_true
