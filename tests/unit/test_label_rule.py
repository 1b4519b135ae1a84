"""One rule for labels, for every classifier: class ids 0..C-1, anything else refused by name.

A regression target (0.2, 0.4, 0.6, 0.8) prepared as "4 classes" once trained an MLP on labels
cast to int64, every one class 0, and reported "test accuracy 1.0000". Now every model, numpy
and torch, reads labels through ``class_ids`` and refuses what is not a class id, and ``data
prepare`` says when labels look like a regression target.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from lambdaml.data import shards
from lambdaml.errors import DataError
from lambdaml.models.base import class_ids
from lambdaml.models.linear import LinearSVM, LogisticRegression
from lambdaml.models.multiclass import MulticlassSVM, SoftmaxRegression

FRACTIONAL = np.array([0.2, 0.4, 0.6, 0.8] * 5)


def classifiers() -> list[object]:
    made: list[object] = [
        LogisticRegression(3),
        LinearSVM(3),
        SoftmaxRegression(3, n_classes=4),
        MulticlassSVM(3, n_classes=4),
    ]
    torch_models = pytest.importorskip("lambdaml.models.torch_models")
    made.append(torch_models.MLP(3, n_classes=4, hidden=[4]))
    return made


@pytest.mark.parametrize("index", range(5))
def test_every_classifier_refuses_labels_that_are_not_class_ids(index: int) -> None:
    model = classifiers()[index]
    X = np.ones((len(FRACTIONAL), 3), dtype=np.float32)
    params = model.init_params(0)  # type: ignore[attr-defined]
    with pytest.raises(DataError, match=r"needs class labels 0\.\.[13]; found 0\.2 \(20 of 20 labels\)"):
        model.loss_grad_sum(params, X, FRACTIONAL)  # type: ignore[attr-defined]
    with pytest.raises(DataError, match="needs class labels"):
        model.accuracy(params, X, FRACTIONAL)  # type: ignore[attr-defined]


def test_class_ids_refuses_each_kind_of_non_class() -> None:
    assert class_ids(np.array([0.0, 2.0, 1.0]), 3, "softmax").tolist() == [0, 2, 1]
    for bad in (2.5, -1.0, 3.0, float("nan")):
        with pytest.raises(DataError, match=r"model 'softmax' needs class labels 0\.\.2"):
            class_ids(np.array([0.0, bad]), 3, "softmax")


def test_binary_models_read_zero_one_and_minus_one_plus_one_files() -> None:
    model = LogisticRegression(2)
    assert model.labels(np.array([-1.0, 1.0, 1.0])).tolist() == [0.0, 1.0, 1.0]
    assert model.labels(np.array([0.0, 1.0])).tolist() == [0.0, 1.0]
    with pytest.raises(DataError, match=r"model 'lr' needs class labels 0\.\.1; found 2"):
        model.labels(np.array([0.0, 2.0]))


@pytest.mark.parametrize(
    ("labels", "warned"),
    [
        (FRACTIONAL, True),  # non-integers: a regression target
        (np.arange(200, dtype=np.float64), True),  # 200 distinct values
        (np.array([0.0, 1.0, 2.0] * 10), False),
        (np.array([0.25, 0.75] * 10), False),  # two values are always two classes
    ],
)
def test_prepare_says_when_labels_look_like_a_regression_target(
    labels: np.ndarray, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from lambdaml.channels.memory import MemoryChannel

    X = np.ones((len(labels), 2), dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="lambdaml.data.shards"):
        shards.prepare(MemoryChannel(), "reg", X, labels, shards=1, test_fraction=0.0)
    said = [r.getMessage() for r in caplog.records if "regression target" in r.getMessage()]
    assert len(said) == int(warned), said
