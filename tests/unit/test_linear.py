"""Logistic regression in numpy: exact gradients, stable losses, label conventions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lambdaml.models import MODELS
from lambdaml.models.linear import LogisticRegression


def problem(n: int = 40, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.integers(0, 2, size=n).astype(np.float64)
    params = rng.normal(size=d + 1)
    return X, y, params


def reference_loss(params: np.ndarray, X: np.ndarray, y01: np.ndarray) -> float:
    """Summed cross-entropy written the textbook way (fine for moderate logits)."""
    p = 1.0 / (1.0 + np.exp(-(X @ params[:-1] + params[-1])))
    return float(-np.sum(y01 * np.log(p) + (1 - y01) * np.log(1 - p)))


def test_registered_as_lr() -> None:
    assert MODELS.get("lr") is LogisticRegression


def test_n_params_and_zero_init() -> None:
    model = LogisticRegression(7)
    assert model.n_params == 8
    params = model.init_params(seed=123)
    assert params.shape == (8,) and params.dtype == np.float64
    assert not params.any()
    np.testing.assert_array_equal(params, model.init_params(seed=0))  # same start on every worker


def test_loss_matches_the_textbook_formula() -> None:
    X, y, params = problem()
    loss, _ = LogisticRegression(5).loss_grad_sum(params, X, y)
    assert loss == pytest.approx(reference_loss(params, X, y), rel=1e-12)
    # at zero parameters every example costs log 2
    zero_loss, _ = LogisticRegression(5).loss_grad_sum(np.zeros(6), X, y)
    assert zero_loss == pytest.approx(len(y) * np.log(2.0), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradient_matches_central_finite_differences(seed: int) -> None:
    X, y, params = problem(seed=seed)
    model = LogisticRegression(X.shape[1])
    _, grad = model.loss_grad_sum(params, X, y)
    eps = 1e-6
    numeric = np.empty_like(params)
    for i in range(len(params)):
        step = np.zeros_like(params)
        step[i] = eps
        plus, _ = model.loss_grad_sum(params + step, X, y)
        minus, _ = model.loss_grad_sum(params - step, X, y)
        numeric[i] = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6 * np.abs(numeric).max())
    assert np.abs(grad[-1]) > 0  # the bias component is exercised, not trivially zero


def test_gradient_is_a_sum_over_examples() -> None:
    X, y, params = problem(n=30)
    model = LogisticRegression(5)
    total_loss, total_grad = model.loss_grad_sum(params, X, y)
    parts = [model.loss_grad_sum(params, X[s], y[s]) for s in (slice(0, 7), slice(7, 30))]
    assert total_loss == pytest.approx(sum(p[0] for p in parts), rel=1e-12)
    np.testing.assert_allclose(total_grad, parts[0][1] + parts[1][1], rtol=1e-12)


def test_gradient_does_not_modify_params() -> None:
    X, y, params = problem()
    before = params.copy()
    LogisticRegression(5).loss_grad_sum(params, X, y)
    np.testing.assert_array_equal(params, before)


@pytest.mark.parametrize("z", [1000.0, -1000.0, 1e6, -1e6])
def test_extreme_logits_give_finite_loss_and_gradient(z: float) -> None:
    model = LogisticRegression(1)
    X = np.array([[1.0], [1.0]])
    params = np.array([z, 0.0])
    y_right = np.array([1.0, 1.0]) if z > 0 else np.array([0.0, 0.0])
    y_wrong = 1.0 - y_right
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow or 0/0 on the way
        loss_right, grad_right = model.loss_grad_sum(params, X, y_right)
        loss_wrong, grad_wrong = model.loss_grad_sum(params, X, y_wrong)
    assert np.isfinite(loss_right) and np.isfinite(loss_wrong)
    assert loss_right == pytest.approx(0.0, abs=1e-300)
    assert loss_wrong == pytest.approx(2 * abs(z), rel=1e-12)  # log(1 + e^|z|) ~ |z| per example
    assert np.all(np.isfinite(grad_right)) and np.all(np.isfinite(grad_wrong))
    np.testing.assert_allclose(grad_right, 0.0, atol=1e-300)
    np.testing.assert_allclose(np.abs(grad_wrong), [2.0, 2.0])  # sigmoid saturates at 0 or 1


def test_float32_data_gives_float64_gradient() -> None:
    X, y, params = problem()
    model = LogisticRegression(5)
    loss32, grad32 = model.loss_grad_sum(params, X.astype(np.float32), y.astype(np.float32))
    loss64, grad64 = model.loss_grad_sum(params, X.astype(np.float32).astype(np.float64), y)
    assert grad32.dtype == np.float64
    assert loss32 == pytest.approx(loss64, rel=1e-6)
    np.testing.assert_allclose(grad32, grad64, rtol=1e-5)


def test_minus_one_plus_one_labels_behave_like_zero_one() -> None:
    X, y01, params = problem()
    ypm = 2 * y01 - 1
    assert set(np.unique(ypm)) == {-1.0, 1.0}
    model = LogisticRegression(5)
    loss01, grad01 = model.loss_grad_sum(params, X, y01)
    losspm, gradpm = model.loss_grad_sum(params, X, ypm)
    assert losspm == pytest.approx(loss01, rel=1e-12)
    np.testing.assert_allclose(gradpm, grad01, rtol=1e-12)
    assert model.accuracy(params, X, ypm) == model.accuracy(params, X, y01)
    assert model.mean_loss(params, X, ypm) == pytest.approx(loss01 / len(y01))


def test_regularizer_grad_is_l2_times_weights_with_bias_zero() -> None:
    model = LogisticRegression(3, l2=0.5)
    params = np.array([1.0, -2.0, 4.0, 10.0])
    before = params.copy()
    grad = model.regularizer_grad(params)
    np.testing.assert_array_equal(grad, [0.5, -1.0, 2.0, 0.0])
    np.testing.assert_array_equal(params, before)  # the bias is zeroed in a copy, not in the model
    np.testing.assert_array_equal(LogisticRegression(3).regularizer_grad(params), [0.0, 0.0, 0.0, 0.0])


def test_accuracy_of_a_known_separating_model_is_one() -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 3))
    w, b = np.array([2.0, -1.0, 0.5]), 0.3
    margin = X @ w + b
    keep = np.abs(margin) > 0.1  # no point exactly on the boundary
    X, y = X[keep], (margin[keep] > 0).astype(np.float64)
    model = LogisticRegression(3)
    params = np.append(w, b)
    assert model.accuracy(params, X, y) == 1.0
    assert model.accuracy(params, X, 2 * y - 1) == 1.0
    assert model.accuracy(-params, X, y) == 0.0
    np.testing.assert_array_equal(model.predict(params, X), y)


def test_empty_batch() -> None:
    model = LogisticRegression(3)
    X, y = np.zeros((0, 3)), np.zeros(0)
    loss, grad = model.loss_grad_sum(np.ones(4), X, y)
    assert loss == 0.0
    np.testing.assert_array_equal(grad, np.zeros(4))
    assert np.isnan(model.mean_loss(np.ones(4), X, y))
    assert np.isnan(model.accuracy(np.ones(4), X, y))


def test_gradient_descent_decreases_the_loss() -> None:
    X, y, _ = problem(n=200, seed=9)
    model = LogisticRegression(5, l2=0.01)
    params = model.init_params(0)
    losses = []
    for _ in range(30):
        loss, grad = model.loss_grad_sum(params, X, y)
        losses.append(loss / len(y))
        params = params - 0.5 * (grad / len(y) + model.regularizer_grad(params))
    assert losses[-1] < losses[0] - 0.01
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(losses))
