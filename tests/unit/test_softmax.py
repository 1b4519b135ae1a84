"""Multiclass linear models (softmax regression, Crammer-Singer SVM) and the binary models' refusal of them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from lambdaml import catalogue
from lambdaml.config import ModelSpec
from lambdaml.data.shards import Manifest
from lambdaml.data.sparse import CSRMatrix
from lambdaml.errors import ConfigError, DataError
from lambdaml.models import MODELS
from lambdaml.models.linear import LinearSVM, LogisticRegression
from lambdaml.models.multiclass import MulticlassLinearModel, MulticlassSVM, SoftmaxRegression

MULTICLASS = [SoftmaxRegression, MulticlassSVM]


def problem(n: int = 40, d: int = 5, c: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.integers(0, c, size=n).astype(np.float32)
    params = rng.normal(size=(d + 1) * c)
    return X, y, params


def manifest(n_classes: int, name: str = "digits") -> Manifest:
    """What ``build`` reads of a manifest (the full record also carries shard sizes and hashes)."""
    return cast(
        Manifest, SimpleNamespace(name=name, n_features=64, n_classes=n_classes, format="dense", sample_shape=None)
    )


def numeric_gradient(model: MulticlassLinearModel, params: np.ndarray, X: Any, y: np.ndarray) -> np.ndarray:
    eps = 1e-6
    out = np.empty_like(params)
    for i in range(len(params)):
        step = np.zeros_like(params)
        step[i] = eps
        out[i] = (model.loss_grad_sum(params + step, X, y)[0] - model.loss_grad_sum(params - step, X, y)[0]) / (2 * eps)
    return out


def split(params: np.ndarray, d: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    return params[:-c].reshape(d, c), params[-c:]


def test_registered_and_sharing_one_base() -> None:
    assert MODELS.get("softmax") is SoftmaxRegression
    assert MODELS.get("multiclass_svm") is MulticlassSVM
    for cls in MULTICLASS:
        assert issubclass(cls, MulticlassLinearModel)
        assert not catalogue.MODELS["softmax"].binary and not catalogue.MODELS["multiclass_svm"].binary
        model = cls(6, n_classes=3)
        assert model.n_params == 7 * 3
        params = model.init_params(seed=9)
        assert params.dtype == np.float64 and params.shape == (21,) and not params.any()


def test_softmax_loss_matches_the_textbook_formula() -> None:
    X, y, params = problem()
    model = SoftmaxRegression(5, n_classes=4)
    W, b = split(params, 5, 4)
    S = X @ W + b
    p = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    expected = -np.sum(np.log(p[np.arange(len(y)), y.astype(int)]))
    assert model.loss_grad_sum(params, X, y)[0] == pytest.approx(expected, rel=1e-12)
    # at zero parameters every example costs log C
    assert model.loss_grad_sum(np.zeros_like(params), X, y)[0] == pytest.approx(len(y) * np.log(4), rel=1e-12)


def test_crammer_singer_loss_matches_the_definition() -> None:
    X, y, params = problem()
    W, b = split(params, 5, 4)
    expected = 0.0
    for x, t in zip(X, y.astype(int), strict=True):
        s = x @ W + b
        expected += max(0.0, 1.0 + max(s[j] for j in range(4) if j != t) - s[t])
    loss, _ = MulticlassSVM(5, n_classes=4).loss_grad_sum(params, X, y)
    assert loss == pytest.approx(expected, rel=1e-12)
    assert MulticlassSVM(5, n_classes=4).loss_grad_sum(np.zeros_like(params), X, y)[0] == pytest.approx(len(y))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_softmax_gradient_matches_central_finite_differences(seed: int) -> None:
    X, y, params = problem(seed=seed)
    model = SoftmaxRegression(5, n_classes=4)
    _, grad = model.loss_grad_sum(params, X, y)
    numeric = numeric_gradient(model, params, X, y)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6 * np.abs(numeric).max())
    assert np.abs(grad[-4:]).min() > 0  # every bias is exercised, not trivially zero


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_svm_subgradient_matches_finite_differences_off_the_kinks(seed: int) -> None:
    X, y, params = problem(seed=seed)
    model = MulticlassSVM(5, n_classes=4)
    # Off the kinks: no slack at 0 and no tie for the best rival, so the loss is smooth around params.
    W, b = split(params, 5, 4)
    S = X @ W + b
    rows, t = np.arange(len(y)), y.astype(int)
    rivals = S.copy()
    rivals[rows, t] = -np.inf
    top2 = np.sort(rivals, axis=1)[:, -2:]
    slack = 1.0 + top2[:, 1] - S[rows, t]
    assert np.abs(slack).min() > 1e-3 and (top2[:, 1] - top2[:, 0]).min() > 1e-3
    assert 0 < (slack > 0).sum() < len(y)  # both sides of the hinge are exercised
    _, grad = model.loss_grad_sum(params, X, y)
    np.testing.assert_allclose(grad, numeric_gradient(model, params, X, y), rtol=1e-6, atol=1e-6)


def test_svm_subgradient_is_zero_at_the_kink() -> None:
    # One example with slack exactly 0 (s_y = 1, the rivals 0): the subgradient used there is 0.
    model = MulticlassSVM(1, n_classes=3)
    params = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])  # W = 0, b = (0, 1, 0)
    loss, grad = model.loss_grad_sum(params, np.array([[1.0]]), np.array([1.0], dtype=np.float32))
    assert loss == 0.0 and not grad.any()


@pytest.mark.parametrize("cls", MULTICLASS)
def test_dense_and_csr_features_give_the_same_loss_and_gradient(cls: type[MulticlassLinearModel]) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 7)).astype(np.float32)
    X[rng.random(X.shape) < 0.6] = 0.0
    X[3] = 0.0  # an empty row
    y = rng.integers(0, 3, size=30).astype(np.float32)
    model = cls(7, n_classes=3)
    params = rng.normal(size=model.n_params)
    dense_loss, dense_grad = model.loss_grad_sum(params, X, y)
    sparse = CSRMatrix.from_dense(X)
    sparse_loss, sparse_grad = model.loss_grad_sum(params, sparse, y)
    assert abs(dense_loss - sparse_loss) <= 1e-10
    np.testing.assert_allclose(sparse_grad, dense_grad, rtol=0, atol=1e-10)
    assert np.abs(dense_grad).max() > 0.1
    np.testing.assert_array_equal(model.predict(params, sparse), model.predict(params, X))


@pytest.mark.parametrize("cls", MULTICLASS)
def test_loss_and_gradient_are_sums_over_examples(cls: type[MulticlassLinearModel]) -> None:
    X, y, params = problem(n=30)
    model = cls(5, n_classes=4)
    total_loss, total_grad = model.loss_grad_sum(params, X, y)
    parts = [model.loss_grad_sum(params, X[s], y[s]) for s in (slice(0, 11), slice(11, 30))]
    assert total_loss == pytest.approx(parts[0][0] + parts[1][0], rel=1e-12)
    np.testing.assert_allclose(total_grad, parts[0][1] + parts[1][1], rtol=1e-12, atol=1e-12)
    before = params.copy()
    model.loss_grad_sum(params, X, y)
    np.testing.assert_array_equal(params, before)  # the gradient does not modify the parameters


def test_softmax_is_stable_for_huge_scores() -> None:
    X, y, params = problem()
    model = SoftmaxRegression(5, n_classes=4)
    loss, grad = model.loss_grad_sum(params * 1e4, X, y)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    # Large scores: the loss of each example tends to its best rival's margin over its own class.
    W, b = split(params * 1e4, 5, 4)
    S = X @ W + b
    margin = S.max(axis=1) - S[np.arange(len(y)), y.astype(int)]
    assert loss == pytest.approx(margin.sum(), rel=1e-6)


@pytest.mark.parametrize(("multi", "binary"), [(SoftmaxRegression, LogisticRegression), (MulticlassSVM, LinearSVM)])
def test_two_classes_train_as_the_binary_model_does(multi: type[MulticlassLinearModel], binary: type) -> None:
    """With C = 2 the score difference s_1 - s_0 follows the binary model's margin at twice the rate.

    Both columns move by opposite amounts, so SGD at rate lr and penalty l2 on the two-class
    model is SGD at 2 lr and l2 / 2 on the binary one, and the decisions agree on every row.
    """
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(-2.0, 1.0, size=(40, 3)), rng.normal(2.0, 1.0, size=(40, 3))])
    y = np.repeat([0.0, 1.0], 40).astype(np.float32)
    two, one = multi(3, n_classes=2, l2=1e-3), binary(3, l2=5e-4)
    p2, p1 = two.init_params(0), one.init_params(0)
    for step in range(40):
        rows = np.random.default_rng(step).choice(len(y), size=16, replace=False)
        _, g2 = two.loss_grad_sum(p2, X[rows], y[rows])
        p2 -= 0.1 * (g2 / len(rows) + two.regularizer_grad(p2))
        _, g1 = one.loss_grad_sum(p1, X[rows], y[rows])
        p1 -= 0.2 * (g1 / len(rows) + one.regularizer_grad(p1))
    W, b = split(p2, 3, 2)
    np.testing.assert_allclose(np.append(W[:, 1] - W[:, 0], b[1] - b[0]), p1, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(two.predict(p2, X), one.predict(p1, X))
    assert two.accuracy(p2, X, y) == one.accuracy(p1, X, y) == 1.0  # the toy set is separable


@pytest.mark.parametrize("cls", MULTICLASS)
@pytest.mark.parametrize("bad", [-1.0, 10.0, 2.5, np.nan])
def test_labels_outside_the_classes_are_a_data_error(cls: type[MulticlassLinearModel], bad: float) -> None:
    model = cls(3, n_classes=10)
    X = np.ones((4, 3))
    y = np.array([0.0, 9.0, bad, 1.0], dtype=np.float32)
    with pytest.raises(DataError, match=r"needs class labels 0\.\.9") as info:
        model.loss_grad_sum(model.init_params(0), X, y)
    assert "\n" not in str(info.value) and cls.name in str(info.value)
    with pytest.raises(DataError):
        model.accuracy(model.init_params(0), X, y)


def test_predict_returns_float_class_ids_and_accuracy_counts_them() -> None:
    model = SoftmaxRegression(2, n_classes=3)
    params = np.zeros(model.n_params)
    params[-3:] = [0.0, 0.0, 0.0]
    params[:-3] = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0]]).reshape(-1)  # W: 2 features x 3 classes
    X = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, 0.0], [-3.0, 0.0]])
    predicted = model.predict(params, X)
    assert predicted.dtype == np.float64
    np.testing.assert_array_equal(predicted, [0.0, 1.0, 2.0, 2.0])
    assert model.accuracy(params, X, np.array([0, 1, 2, 0], dtype=np.float32)) == 0.75


@pytest.mark.parametrize("cls", MULTICLASS)
def test_regularizer_leaves_the_biases_alone(cls: type[MulticlassLinearModel]) -> None:
    model = cls(4, n_classes=3, l2=0.5)
    params = np.random.default_rng(0).normal(size=model.n_params)
    grad = model.regularizer_grad(params)
    assert not grad[-3:].any()
    np.testing.assert_allclose(grad[:-3], 0.5 * params[:-3], rtol=1e-15)
    assert not np.shares_memory(grad, params)


@pytest.mark.parametrize("name", ["lr", "svm"])
def test_binary_models_refuse_a_multiclass_dataset(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        MODELS.get(name).build(ModelSpec(name=name), manifest(10))
    message = str(info.value)
    assert f"model {name!r} is binary" in message and "'digits' has 10 classes" in message
    assert "softmax" in message and "multiclass_svm" in message and "\n" not in message
    assert MODELS.get(name).build(ModelSpec(name=name), manifest(2)).n_params == 65  # two classes are fine


@pytest.mark.parametrize("name", ["softmax", "multiclass_svm"])
@pytest.mark.parametrize("n_classes", [2, 10])
def test_multiclass_models_build_from_the_manifest(name: str, n_classes: int) -> None:
    model = MODELS.get(name).build(ModelSpec(name=name, l2=0.01), manifest(n_classes))
    assert isinstance(model, MulticlassLinearModel)
    assert model.n_classes == n_classes and model.n_features == 64 and model.l2 == 0.01
    assert model.n_params == 65 * n_classes


def test_fewer_than_two_classes_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="at least 2 classes"):
        SoftmaxRegression(3, n_classes=1)


@pytest.mark.parametrize("n_classes", [2, 10])
def test_torch_models_take_the_class_count_and_are_not_refused(n_classes: int) -> None:
    pytest.importorskip("torch")
    mlp = MODELS.get("mlp")
    assert not catalogue.model("mlp").binary
    data = manifest(n_classes)
    mlp.check_dataset("mlp", data)  # not binary: any number of classes
    model = mlp.build(ModelSpec(name="mlp", hidden=[8]), data)
    X = np.random.default_rng(0).normal(size=(6, 64)).astype(np.float32)
    y = (np.arange(6) % n_classes).astype(np.float32)
    loss, grad = model.loss_grad_sum(model.init_params(0), X, y)
    assert np.isfinite(loss) and grad.shape == (model.n_params,)
    assert model.n_params == 64 * 8 + 8 + 8 * n_classes + n_classes  # one logit per class, two included
    assert set(model.predict(model.init_params(0), X).tolist()) <= set(range(n_classes))


def test_admm_l1_shrinks_every_weight_but_no_bias_of_a_multiclass_model() -> None:
    """ADMM soft-thresholds the consensus weights; a multiclass model has a bias per class, all left alone."""
    from lambdaml.algorithms import reify
    from lambdaml.channels.memory import MemoryChannel
    from lambdaml.comm.channel import ChannelCommunicator
    from lambdaml.config import AlgorithmSpec

    X, y, _ = problem(n=60, d=5, c=4, seed=3)
    model = SoftmaxRegression(5, n_classes=4)
    state = reify(
        AlgorithmSpec(name="admm", lr=0.5, l1=1e6, rho=1.0, epochs=1),
        model,
        ChannelCommunicator(MemoryChannel(), "admm-l1", 0, 1),
        model.init_params(0),
    )
    state.on_start(X, y)
    for start in range(0, 60, 20):
        state.step(X[start : start + 20], y[start : start + 20])
    state.end_epoch(0)
    z = state.final_params()
    assert np.all(z[: 5 * 4] == 0.0), "an l1 this large zeroes every weight"
    assert np.count_nonzero(z[model.biases()]) == 4, "no bias is shrunk"
