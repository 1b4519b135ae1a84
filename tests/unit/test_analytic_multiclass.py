"""Multiclass linear models in the cost model: their size follows the classes, as lambdaml's models count it."""

from __future__ import annotations

import pytest

from analytic_model import Workload, aws_profile
from lambdaml.errors import ConfigError
from lambdaml.models.multiclass import MulticlassSVM, SoftmaxRegression


@pytest.mark.parametrize("model, cls", [("softmax", SoftmaxRegression), ("multiclass_svm", MulticlassSVM)])
@pytest.mark.parametrize("features, classes", [(28, 2), (784, 10), (3072, 100)])
def test_the_model_counts_the_parameters_and_bytes_lambdaml_sends(
    model: str, cls: type[SoftmaxRegression], features: int, classes: int
) -> None:
    workload = Workload(model, dataset_bytes=1e6, samples=1000, features=features, classes=classes)
    info = workload.check(aws_profile())
    real = cls(features, n_classes=classes)
    assert workload.n_params(info) == real.n_params
    assert info.bytes_per_param == real.init_params(0).itemsize


def test_a_binary_model_refuses_more_classes() -> None:
    with pytest.raises(ConfigError, match="model 'lr' is binary, but the data has 10 classes; use softmax"):
        Workload("lr", dataset_bytes=1e6, samples=1000, features=28, classes=10).check(aws_profile())
