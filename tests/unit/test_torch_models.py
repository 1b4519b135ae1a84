"""Torch models behind the flat-vector interface: exact gradients, determinism, shapes, training."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lambdaml.config import ModelSpec  # noqa: E402
from lambdaml.errors import ConfigError  # noqa: E402
from lambdaml.models import MODELS  # noqa: E402
from lambdaml.models.torch_models import MLP, MobileNet, ResNet18, TorchModel  # noqa: E402
from lambdaml.optim import SGD  # noqa: E402

IMAGE = [3, 32, 32]
D_IMAGE = 3 * 32 * 32


def tiny(kind: str, n_classes: int = 10) -> TorchModel:
    """Small widths so a test step takes milliseconds."""
    if kind == "mlp":
        return MLP(D_IMAGE, n_classes=n_classes, hidden=[16, 8], sample_shape=IMAGE)
    if kind == "mobilenet":
        return MobileNet(D_IMAGE, n_classes=n_classes, sample_shape=IMAGE, width_mult=0.125)
    return ResNet18(D_IMAGE, n_classes=n_classes, sample_shape=IMAGE, width=4)


KINDS = ["mlp", "mobilenet", "resnet18"]


def batch(n: int, n_classes: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D_IMAGE)).astype(np.float32)
    y = rng.integers(0, n_classes, size=n).astype(np.float32)
    return X, y


def reference_loss_grad(
    model: TorchModel, params: np.ndarray, X: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """Loss and gradient by plain autograd on one flat leaf, sliced by named_parameters order."""
    flat = torch.tensor(params, dtype=torch.float32, requires_grad=True)
    views: dict[str, Any] = {}
    offset = 0
    for name, p in model.module.named_parameters():
        views[name] = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    assert offset == model.n_params
    inputs = torch.from_numpy(X).reshape(len(X), *model.sample_shape)
    logits = torch.func.functional_call(model.module, views, (inputs,))
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y.astype(np.int64)), reduction="sum")
    loss.backward()
    return float(loss.item()), flat.grad.numpy()


def test_registered_names() -> None:
    assert MODELS.get("mlp") is MLP
    assert MODELS.get("mobilenet") is MobileNet
    assert MODELS.get("resnet18") is ResNet18


def test_build_from_spec_and_manifest() -> None:
    spec = ModelSpec(name="mlp", l2=0.01, hidden=[32, 16], width=0.25)
    manifest = SimpleNamespace(name="digits", n_features=64, n_classes=10, sample_shape=[1, 8, 8], format="dense")
    model = MLP.build(spec, manifest)  # type: ignore[arg-type]
    assert isinstance(model, MLP) and model.hidden == [32, 16] and model.l2 == 0.01
    assert model.n_params == 64 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10
    conv = ResNet18.build(spec, manifest)  # type: ignore[arg-type]
    assert isinstance(conv, ResNet18) and conv.sample_shape == (1, 8, 8)
    assert conv.width == 16  # the spec's width multiplier scales the first stage's 64 channels
    mobile = MobileNet.build(spec, manifest)  # type: ignore[arg-type]
    assert isinstance(mobile, MobileNet) and mobile.width_mult == 0.25


@pytest.mark.parametrize("kind", KINDS)
def test_flat_params_round_trip_exactly(kind: str) -> None:
    model = tiny(kind)
    params = np.random.default_rng(1).normal(size=model.n_params).astype(np.float32)
    model._load(params)
    back = torch.nn.utils.parameters_to_vector(model.module.parameters()).detach().numpy()
    np.testing.assert_array_equal(back, params)
    params[0] += 1.0  # the module holds a copy, not a view of the caller's array
    assert back[0] != params[0]


@pytest.mark.parametrize("kind", KINDS)
def test_init_params_deterministic_by_seed(kind: str) -> None:
    a, b = tiny(kind), tiny(kind)  # as on two workers
    p0 = a.init_params(seed=7)
    assert p0.dtype == np.float32 and p0.shape == (a.n_params,)
    np.testing.assert_array_equal(p0, b.init_params(seed=7))
    assert not np.array_equal(p0, a.init_params(seed=8))
    state = torch.random.get_rng_state()
    a.init_params(seed=7)
    assert torch.equal(state, torch.random.get_rng_state())  # the global torch RNG is untouched


@pytest.mark.parametrize("kind", KINDS)
def test_loss_grad_sum_matches_autograd_and_adds_over_half_batches(kind: str) -> None:
    model = tiny(kind)
    params = model.init_params(seed=3)
    X, y = batch(8)
    loss, grad = model.loss_grad_sum(params, X, y)
    assert grad.dtype == np.float32 and grad.shape == params.shape
    ref_loss, ref_grad = reference_loss_grad(model, params, X, y)
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)

    loss_a, grad_a = model.loss_grad_sum(params, X[:3], y[:3])
    loss_b, grad_b = model.loss_grad_sum(params, X[3:], y[3:])
    assert loss_a + loss_b == pytest.approx(loss, rel=1e-5)
    # float32 sums in a different order: agree to 1e-5 of the gradient's largest entry
    assert np.max(np.abs(grad_a + grad_b - grad)) <= 1e-5 * max(1.0, float(np.max(np.abs(grad))))


def test_grad_follows_the_params_dtype_and_empty_batch_is_zero() -> None:
    model = tiny("mlp")
    params64 = model.init_params(seed=0).astype(np.float64)
    X, y = batch(4)
    _, grad = model.loss_grad_sum(params64, X, y)
    assert grad.dtype == np.float64
    loss, grad = model.loss_grad_sum(params64, X[:0], y[:0])
    assert loss == 0.0 and grad.shape == params64.shape and not grad.any()


def test_resnet18_full_width_has_the_paper_parameter_count() -> None:
    model = ResNet18(D_IMAGE, n_classes=10, sample_shape=IMAGE)
    # CIFAR ResNet-18: GroupNorm has the same affine parameters BatchNorm would (no buffers).
    assert model.n_params == 11_173_962
    assert not list(model.module.buffers())


def test_mobilenet_full_width_parameter_count() -> None:
    assert MobileNet(D_IMAGE, n_classes=10, sample_shape=IMAGE).n_params == 3_217_226


@pytest.mark.parametrize("cls", [MobileNet, ResNet18])
def test_full_width_conv_models_forward_a_batch_of_two(cls: type[TorchModel]) -> None:
    model = cls(D_IMAGE, n_classes=10, sample_shape=IMAGE)
    X, _ = batch(2)
    predictions = model.predict(model.init_params(seed=0), X)
    assert predictions.shape == (2,) and predictions.dtype == np.int64
    assert ((predictions >= 0) & (predictions < 10)).all()


@pytest.mark.parametrize(("kind", "lr"), [("mlp", 0.1), ("mobilenet", 0.02), ("resnet18", 0.02)])
def test_a_few_sgd_steps_reduce_the_loss(kind: str, lr: float) -> None:
    model = tiny(kind, n_classes=4)
    params = model.init_params(seed=0)
    X, y = batch(16, n_classes=4, seed=5)
    optimizer = SGD(lr)
    first, _ = model.loss_grad_sum(params, X, y)
    for _ in range(5):
        _, grad = model.loss_grad_sum(params, X, y)
        optimizer.step(params, grad / len(y))
    last, _ = model.loss_grad_sum(params, X, y)
    assert last < 0.9 * first


@pytest.mark.parametrize("kind", KINDS)
def test_predict_and_mean_loss_in_batches(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from lambdaml.models import torch_models

    model = tiny(kind)
    params = model.init_params(seed=0)
    X, y = batch(10)
    monkeypatch.setattr(torch_models, "PREDICT_BATCH", 4)  # three chunks, the last one short
    predictions = model.predict(params, X)
    assert predictions.shape == (10,) and predictions.dtype == np.int64
    loss, _ = model.loss_grad_sum(params, X, y)
    assert model.mean_loss(params, X, y) == pytest.approx(loss / 10, rel=1e-5)
    assert model.accuracy(params, X, y) == pytest.approx(float(np.mean(predictions == y.astype(np.int64))))
    assert model.predict(params, X[:0]).shape == (0,)


@pytest.mark.parametrize("cls", [MobileNet, ResNet18])
@pytest.mark.parametrize("shape", [None, [64], [8, 8]])
def test_conv_models_reject_non_image_samples(cls: type[TorchModel], shape: list[int] | None) -> None:
    with pytest.raises(ConfigError, match=rf"{cls.name}.*\(C, H, W\).*\[(64|8, 8)\]"):
        cls(64, n_classes=10, sample_shape=shape)


def test_sample_shape_must_hold_the_features() -> None:
    with pytest.raises(ConfigError, match=r"sample_shape \[3, 32, 32\] does not hold 100 features"):
        MLP(100, n_classes=10, sample_shape=IMAGE)


def test_numpy_path_does_not_import_torch() -> None:
    code = "import sys, lambdaml.models, lambdaml.models.linear; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mlp_learns_digits() -> None:
    """Single-process numpy SGD on flat params reaches the accuracy the 4-worker run needs."""
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    X = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    test, train = perm[:360], perm[360:]
    model = MLP(64, n_classes=10, hidden=[128])
    params = model.init_params(seed=0)
    optimizer = SGD(0.5)
    for epoch in range(15):
        order = np.random.default_rng(epoch).permutation(train)
        for start in range(0, len(order), 32):
            rows = order[start : start + 32]
            _, grad = model.loss_grad_sum(params, X[rows], y[rows])
            optimizer.step(params, grad / len(rows))
    assert model.accuracy(params, X[test], y[test]) >= 0.95


def test_thread_count_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from lambdaml.models import torch_models

    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(torch_models, "_threads_configured", False)
        monkeypatch.setenv(torch_models.ENV_TORCH_THREADS, "2")
        torch_models.configure_threads()
        assert torch.get_num_threads() == 2
        monkeypatch.setenv(torch_models.ENV_TORCH_THREADS, "3")
        torch_models.configure_threads()  # once per process: a later change is ignored
        assert torch.get_num_threads() == 2
        monkeypatch.setattr(torch_models, "_threads_configured", False)
        monkeypatch.setenv(torch_models.ENV_TORCH_THREADS, "many")
        with pytest.raises(ConfigError, match="LAMBDAML_TORCH_THREADS='many'"):
            torch_models.configure_threads()
    finally:
        torch.set_num_threads(before)
