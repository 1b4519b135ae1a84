"""Linear SVM in numpy: hinge loss, its subgradient, labels, and the code it shares with LR."""

from __future__ import annotations

import numpy as np
import pytest

from lambdaml.models import MODELS
from lambdaml.models.linear import LinearModel, LinearSVM, LogisticRegression


def problem(n: int = 50, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, 2, size=n).astype(np.float64), rng.normal(size=d + 1)


def reference_hinge(params: np.ndarray, X: np.ndarray, y01: np.ndarray) -> float:
    s = 2 * y01 - 1
    return float(sum(max(0.0, 1.0 - si * (x @ params[:-1] + params[-1])) for x, si in zip(X, s, strict=True)))


def test_registered_as_svm_and_shares_the_linear_base() -> None:
    assert MODELS.get("svm") is LinearSVM
    assert issubclass(LinearSVM, LinearModel) and issubclass(LogisticRegression, LinearModel)
    model = LinearSVM(6)
    assert model.n_params == 7
    assert not model.init_params(seed=5).any()


def test_hinge_loss_matches_the_definition() -> None:
    X, y, params = problem()
    loss, _ = LinearSVM(4).loss_grad_sum(params, X, y)
    assert loss == pytest.approx(reference_hinge(params, X, y), rel=1e-12)
    zero_loss, _ = LinearSVM(4).loss_grad_sum(np.zeros(5), X, y)
    assert zero_loss == pytest.approx(len(y))  # margin 0: every example costs 1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_subgradient_matches_finite_differences_off_the_hinge(seed: int) -> None:
    X, y, params = problem(seed=seed)
    model = LinearSVM(4)
    s = 2 * y - 1
    margins = s * (X @ params[:-1] + params[-1])
    eps = 1e-6
    assert np.min(np.abs(margins - 1.0)) > 1e-3  # no example sits on the kink, so the loss is smooth here
    _, grad = model.loss_grad_sum(params, X, y)
    numeric = np.empty_like(params)
    for i in range(len(params)):
        step = np.zeros_like(params)
        step[i] = eps
        numeric[i] = (model.loss_grad_sum(params + step, X, y)[0] - model.loss_grad_sum(params - step, X, y)[0]) / (
            2 * eps
        )
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)
    assert np.abs(grad).max() > 0.1  # some examples are inside the margin


def test_examples_beyond_the_margin_contribute_nothing() -> None:
    X = np.array([[2.0], [-3.0]])
    y = np.array([1.0, 0.0])
    params = np.array([1.0, 0.0])  # margins 2 and 3: both beyond 1
    loss, grad = LinearSVM(1).loss_grad_sum(params, X, y)
    assert loss == 0.0
    np.testing.assert_array_equal(grad, [0.0, 0.0])
    # inside the margin: d/dw (1 - s x w) = -s x
    loss, grad = LinearSVM(1).loss_grad_sum(np.array([0.1, 0.0]), X, y)
    assert loss == pytest.approx((1 - 0.2) + (1 - 0.3))
    np.testing.assert_allclose(grad, [-2.0 + -3.0, -1.0 + 1.0])


def test_minus_one_plus_one_labels_behave_like_zero_one() -> None:
    X, y01, params = problem()
    model = LinearSVM(4)
    loss01, grad01 = model.loss_grad_sum(params, X, y01)
    losspm, gradpm = model.loss_grad_sum(params, X, 2 * y01 - 1)
    assert losspm == loss01
    np.testing.assert_array_equal(gradpm, grad01)
    assert model.accuracy(params, X, 2 * y01 - 1) == model.accuracy(params, X, y01)


def test_gradient_is_a_sum_and_regularizer_skips_the_bias() -> None:
    X, y, params = problem(n=30)
    model = LinearSVM(4, l2=0.5)
    total = model.loss_grad_sum(params, X, y)
    a, b = model.loss_grad_sum(params, X[:11], y[:11]), model.loss_grad_sum(params, X[11:], y[11:])
    assert total[0] == pytest.approx(a[0] + b[0], rel=1e-12)
    np.testing.assert_allclose(total[1], a[1] + b[1], rtol=1e-12)
    np.testing.assert_array_equal(model.regularizer_grad(np.array([2.0, -4.0, 0.0, 1.0, 9.0])), [1, -2, 0, 0.5, 0])


def test_trained_svm_separates_a_separable_set() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 2))
    margin = X @ np.array([1.5, -2.0]) + 0.25
    keep = np.abs(margin) > 0.3  # a clear gap between the classes
    X, y = X[keep], (margin[keep] > 0).astype(np.float64)
    model = LinearSVM(2, l2=1e-4)
    params = model.init_params(0)
    for _ in range(300):
        _, grad = model.loss_grad_sum(params, X, y)
        params -= 0.5 * (grad / len(y) + model.regularizer_grad(params))
    assert model.accuracy(params, X, y) == 1.0
    predictions = model.predict(params, X)
    assert set(np.unique(predictions).tolist()) == {0.0, 1.0}  # classes, not signs
    assert model.mean_loss(params, X, y) < 0.05
