"""How well a trained model does on labelled rows: what ``lambdaml evaluate`` prints.

Accuracy and the job's own loss (log loss for LR, softmax and the torch models, hinge for the
SVMs); for a binary model the ROC-AUC and the confusion matrix; for a multiclass one
precision, recall and F1 per class; for KMeans the mean squared distance to the nearest
centroid. Plain numpy, so the command line needs no scikit-learn.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import numpy as np

from lambdaml.arrays import Array
from lambdaml.trained.model import TrainedModel

#: The name of each model's own loss, as evaluate prints it.
LOSS_NAMES = {"lr": "log loss", "softmax": "log loss", "svm": "hinge loss", "multiclass_svm": "hinge loss"}


#: A class's figures: its label as the file named it, precision, recall, F1 and support (``class``
#: is a keyword: the functional form).
ClassFigures = TypedDict(
    "ClassFigures", {"class": int | float, "precision": float, "recall": float, "f1": float, "support": int}
)


class Evaluation(TypedDict):
    """What ``lambdaml model evaluate`` prints: a clustering's distance, or a classifier's figures."""

    model: str
    job_id: str
    rows: int
    mean_squared_distance: NotRequired[float]  # a clustering's, to the nearest centroid
    accuracy: NotRequired[float]
    loss_name: NotRequired[str]
    loss: NotRequired[float]
    classes: NotRequired[list[int | float]]  # as the file named them
    confusion: NotRequired[list[list[int]]]  # rows: true class, columns: predicted
    roc_auc: NotRequired[float | None]  # two classes
    per_class: NotRequired[list[ClassFigures]]  # more
    test: NotRequired[str]  # what it was evaluated on, as the command names it


def evaluate(model: TrainedModel, X: Any, y: Any) -> Evaluation:
    """Every figure of ``model`` on ``(X, y)``, as a JSON-ready dict; labels are the file's own values."""
    features = model.features(X)
    rows = int(features.shape[0])
    if not model.supervised:
        return {
            "model": model.name,
            "job_id": model.job_id,
            "rows": rows,
            "mean_squared_distance": model.mean_loss(features, np.zeros(rows)),
        }
    truth = model.class_indices(y).astype(np.int64)
    predicted = np.asarray(model.model.predict(model.params, features)).astype(np.int64)
    classes = model.classes_
    report: Evaluation = {
        "model": model.name,
        "job_id": model.job_id,
        "rows": rows,
        "accuracy": float(np.mean(predicted == truth)) if rows else float("nan"),
        "loss_name": LOSS_NAMES.get(model.name, "log loss"),
        "loss": model.model.mean_loss(model.params, features, truth.astype(np.float64)),
        "classes": [_plain(c) for c in classes],
    }
    matrix = confusion(truth, predicted, len(classes))
    report["confusion"] = matrix.tolist()  # rows: true class, columns: predicted
    if len(classes) == 2:
        report["roc_auc"] = roc_auc(truth, _positive_score(model, features))
    else:
        report["per_class"] = per_class(matrix, classes)
    return report


def _positive_score(model: TrainedModel, features: Any) -> Array:
    """How strongly each row is the second class: its probability where there is one, else its margin."""
    decision = model.model.decision(model.params, features)
    return decision if decision.ndim == 1 else decision[:, 1] - decision[:, 0]


def confusion(truth: Array, predicted: Array, n_classes: int) -> Array:
    matrix: Array = np.bincount(truth * n_classes + predicted, minlength=n_classes * n_classes)
    return matrix.reshape(n_classes, n_classes)


def roc_auc(truth: Array, score: Array) -> float | None:
    """The probability that a random positive row scores above a random negative one (ties count half)."""
    positives, negatives = int(np.sum(truth == 1)), int(np.sum(truth == 0))
    if positives == 0 or negatives == 0:
        return None  # undefined with one class present
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score), dtype=np.float64)
    sorted_scores = score[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(average, counts)
    rank_sum = float(ranks[truth == 1].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def per_class(matrix: Array, classes: Array) -> list[ClassFigures]:
    """Precision, recall, F1 and support of every class, from the confusion matrix."""
    rows: list[ClassFigures] = []
    for i, label in enumerate(classes):
        true_positive = float(matrix[i, i])
        predicted, support = float(matrix[:, i].sum()), int(matrix[i, :].sum())
        precision = true_positive / predicted if predicted else 0.0
        recall = true_positive / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append({"class": _plain(label), "precision": precision, "recall": recall, "f1": f1, "support": support})
    return rows


def _plain(value: Any) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


__all__ = ["LOSS_NAMES", "confusion", "evaluate", "per_class", "roc_auc"]
