"""Torch models (MLP, MobileNet, ResNet18) behind the flat-vector ``Model`` interface.

Torch computes only the loss and its gradient; parameters live in one flat float32 numpy
vector that the numpy optimizers update and the collectives move. This is the only module
that imports torch, so the numpy path (LR, SVM, KMeans) stays zip-deployable.

No model here has buffers (BatchNorm's running statistics would be state outside the flat
vector: workers would silently diverge and model averaging would ignore them), so the
convolutional models use GroupNorm, whose affine weights are ordinary parameters.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from lambdaml import settings
from lambdaml.arrays import Array
from lambdaml.data.sparse import Features, require_dense
from lambdaml.errors import ConfigError, DataError
from lambdaml.models.base import Model, class_ids
from lambdaml.models.multiclass import softmax_rows

if TYPE_CHECKING:
    from lambdaml.config import ModelSpec
    from lambdaml.data.shards import Manifest

logger = logging.getLogger(__name__)

# Torch intra-op threads per process. Unset: 1, because W worker processes share the
# machine's cores and oversubscription slows every one of them; 0: torch's own default
# (all cores, e.g. one IaaS process per machine); N > 0: N threads.
ENV_TORCH_THREADS = settings.ENV_TORCH_THREADS

PREDICT_BATCH = 256  # rows per forward pass in predict/mean_loss: bounds activation memory

_threads_configured = False
_INIT_LOCK = threading.Lock()


def configure_threads() -> None:
    """Set torch's thread count once per process, from ``LAMBDAML_TORCH_THREADS`` (default 1)."""
    global _threads_configured
    if _threads_configured:
        return
    raw = os.environ.get(ENV_TORCH_THREADS, "").strip()
    try:
        threads = int(raw) if raw else 1
    except ValueError:
        raise ConfigError(
            f"{ENV_TORCH_THREADS}={raw!r}: expected a whole number of threads (0: torch's default)"
        ) from None
    if threads < 0:
        raise ConfigError(f"{ENV_TORCH_THREADS}={raw!r}: expected 0 or more threads")
    if threads:
        torch.set_num_threads(threads)
    _threads_configured = True
    logger.debug("torch uses %d intra-op threads", torch.get_num_threads())


class TorchModel(Model):
    """A classifier whose ``nn.Module`` is built by ``_make_module``; everything else is shared.

    Losses are summed cross-entropy over class ids 0..n_classes-1. Parameters travel as one
    float32 vector in ``module.parameters()`` order.
    """

    name = "torch"  # the registry name, used in messages

    def __init__(
        self,
        n_features: int,
        *,
        n_classes: int,
        sample_shape: Sequence[int] | None = None,
        l2: float = 0.0,
    ) -> None:
        super().__init__(n_features, l2=l2)
        configure_threads()
        if n_classes < 2:
            raise ConfigError(f"model {self.name!r} needs at least 2 classes; the dataset has {n_classes}")
        self.n_classes = n_classes
        self.sample_shape = tuple(int(s) for s in sample_shape) if sample_shape else (n_features,)
        if math.prod(self.sample_shape) != n_features:
            raise ConfigError(
                f"model {self.name!r}: sample_shape {list(self.sample_shape)} does not hold {n_features} features"
            )
        self._check_shape(self.sample_shape)
        self.module = self._seeded_module(0)
        if any(True for _ in self.module.buffers()):
            # A buffer (e.g. BatchNorm statistics) would be model state outside the flat vector.
            raise TypeError(f"{type(self).__name__}: a module with buffers cannot be trained through flat parameters")
        self._n_params = sum(p.numel() for p in self.module.parameters())
        self._ddp: nn.Module | None = None
        self._ddp_world = 1

    def distribute(self) -> None:
        """Wrap the module in DistributedDataParallel (the default process group must exist).

        DDP reduces gradients bucket by bucket while backward still runs, overlapping
        communication with compute. It averages over ranks; ``loss_grad_sum`` scales back
        to the sum, so unequal batches reduce exactly as in the channel path.
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self._ddp = DistributedDataParallel(self.module)
        self._ddp_world = dist.get_world_size()
        self.gradients_summed_across_workers = True

    @classmethod
    def build(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        if manifest.format != "dense":
            raise ConfigError(f"model {cls.name!r} needs dense rows; dataset {manifest.name!r} is {manifest.format}")
        return cls._built(spec, manifest)

    @classmethod
    def _built(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        """The network for the job's model spec; one with options of its own passes them too."""
        return cls(manifest.n_features, n_classes=manifest.n_classes, sample_shape=manifest.sample_shape, l2=spec.l2)

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        """Reject a sample shape the architecture cannot take (raise ``ConfigError``)."""

    @abstractmethod
    def _make_module(self) -> nn.Module:
        """The network, mapping (batch, *sample_shape) float32 to (batch, n_classes) logits."""

    def _seeded_module(self, seed: int) -> nn.Module:
        # fork_rng: seeding for the init must not disturb anyone else's torch RNG stream. The
        # lock: ranks running as threads (the in-memory channel) share torch's global generator.
        with _INIT_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._make_module()

    @property
    def n_params(self) -> int:
        return self._n_params

    def init_params(self, seed: int) -> Array:
        """Torch's default initialization under ``seed``: the same vector on every worker."""
        module = self._seeded_module(seed)
        return parameters_to_vector(module.parameters()).detach().numpy().astype(np.float32, copy=True)

    def labels(self, y: Array) -> Array:
        return class_ids(y, self.n_classes, self.name)

    def regularizer_grad(self, params: Array) -> Array:
        return self.l2 * params

    def loss_grad_sum(self, params: Array, X: Features, y: Array) -> tuple[float, Array]:
        X = require_dense(X, type(self).__name__)
        if len(y) == 0 and self._ddp is None:
            return 0.0, np.zeros_like(params)
        self._load(params)
        module = self.module
        module.train()
        for p in module.parameters():
            p.grad = None
        forward = self._ddp or module
        if len(y):
            loss = F.cross_entropy(forward(self._inputs(X)), self._targets(y), reduction="sum")
        else:
            # DDP's reduction happens in backward, which every rank must join: a zero-weighted
            # dummy row contributes nothing but takes part.
            dummy = torch.zeros((1, *self.sample_shape))
            loss = F.cross_entropy(forward(dummy), torch.zeros(1, dtype=torch.int64), reduction="sum") * 0.0
        loss.backward()  # type: ignore[no-untyped-call]
        grad = parameters_to_vector(
            [p.grad if p.grad is not None else torch.zeros_like(p) for p in module.parameters()]
        )
        if self._ddp_world > 1:
            grad *= self._ddp_world
        return float(loss.item()), grad.numpy().astype(params.dtype, copy=False)

    def predict(self, params: Array, X: Features) -> Array:
        X = require_dense(X, type(self).__name__)
        self._load(params)
        out = [logits.argmax(dim=1).numpy() for logits in self._eval_logits(X)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def decision(self, params: Array, X: Features) -> Array:
        """The logits, one column per class (float64)."""
        X = require_dense(X, type(self).__name__)
        self._load(params)
        out = [logits.numpy() for logits in self._eval_logits(X)]
        return np.concatenate(out).astype(np.float64) if out else np.zeros((0, self.n_classes))

    def probabilities(self, params: Array, X: Features) -> Array:
        return softmax_rows(self.decision(params, X))

    def mean_loss(self, params: Array, X: Features, y: Array) -> float:
        """Mean cross-entropy without a gradient, in batches (a whole test set fits in memory)."""
        X = require_dense(X, type(self).__name__)
        if len(y) == 0:
            return float("nan")
        self._load(params)
        targets = self._targets(y)
        total = 0.0
        for i, logits in enumerate(self._eval_logits(X)):
            part = targets[i * PREDICT_BATCH : (i + 1) * PREDICT_BATCH]
            total += float(F.cross_entropy(logits, part, reduction="sum").item())
        return total / len(y)

    def _eval_logits(self, X: Array) -> list[torch.Tensor]:
        """Logits of ``X`` in chunks of ``PREDICT_BATCH`` rows, in eval mode without autograd."""
        self.module.eval()
        with torch.no_grad():
            return [self.module(self._inputs(X[i : i + PREDICT_BATCH])) for i in range(0, len(X), PREDICT_BATCH)]

    def _load(self, params: Array) -> None:
        if params.shape != (self._n_params,):
            raise ValueError(f"{type(self).__name__} has {self._n_params} parameters; got a vector of {params.shape}")
        # torch.tensor copies, so the module never aliases the caller's (optimizer-updated) array.
        vector_to_parameters(torch.tensor(params, dtype=torch.float32), self.module.parameters())

    def _inputs(self, X: Array) -> torch.Tensor:
        X = np.ascontiguousarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise DataError(f"model {self.name!r} expects rows of {self.n_features} features; got shape {X.shape}")
        if not X.flags.writeable:  # a shard mapped from its wire bytes; torch wants its own memory
            X = X.copy()
        return torch.from_numpy(X).reshape(len(X), *self.sample_shape)

    def _targets(self, y: Array) -> torch.Tensor:
        return torch.from_numpy(self.labels(y))


class MLP(TorchModel):
    """Fully connected: input -> hidden layers with ReLU -> n_classes logits."""

    name = "mlp"

    def __init__(
        self,
        n_features: int,
        *,
        n_classes: int,
        hidden: Sequence[int] = (128,),
        sample_shape: Sequence[int] | None = None,
        l2: float = 0.0,
    ) -> None:
        self.hidden = [int(h) for h in hidden]
        super().__init__(n_features, n_classes=n_classes, sample_shape=sample_shape, l2=l2)

    @classmethod
    def _built(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        return cls(
            manifest.n_features, n_classes=manifest.n_classes, hidden=list(spec.hidden),
            sample_shape=manifest.sample_shape, l2=spec.l2,
        )  # fmt: skip

    def _make_module(self) -> nn.Module:
        layers: list[nn.Module] = [nn.Flatten()]
        width = self.n_features
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, self.n_classes))
        return nn.Sequential(*layers)


class _ImageModel(TorchModel):
    """A convolutional model: samples must be images (C, H, W)."""

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        if len(shape) != 3:
            raise ConfigError(
                f"model {self.name!r} needs image samples (C, H, W), e.g. [3, 32, 32]; "
                f"the dataset's sample_shape is {list(shape)}"
            )


def _norm(channels: int) -> nn.GroupNorm:
    """GroupNorm: no running statistics, so all of the model's state is in the flat vector.

    Up to 32 groups (Wu and He's default) of at least 8 channels each: one channel per group
    (instance norm) would erase each image's per-channel means, colour among them.
    """
    groups = max(g for g in range(1, 33) if channels % g == 0 and channels // g >= min(8, channels))
    return nn.GroupNorm(groups, channels)


class MobileNet(_ImageModel):
    """MobileNet v1 (depthwise-separable convolutions) for 32x32 inputs, with GroupNorm.

    The stem is a stride-1 3x3 convolution (CIFAR-style; ImageNet's stride-2 stem would
    leave 1x1 maps). ``width_mult`` scales every layer's channels (rounded to multiples of 8).
    """

    name = "mobilenet"
    # (out channels, stride) of the depthwise-separable blocks
    BLOCKS: tuple[tuple[int, int], ...] = (
        (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
        (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
    )  # fmt: skip

    def __init__(
        self,
        n_features: int,
        *,
        n_classes: int,
        sample_shape: Sequence[int] | None = None,
        l2: float = 0.0,
        width_mult: float = 1.0,
    ) -> None:
        if width_mult <= 0:
            raise ConfigError(f"model 'mobilenet': width_mult must be positive; got {width_mult}")
        self.width_mult = width_mult
        super().__init__(n_features, n_classes=n_classes, sample_shape=sample_shape, l2=l2)

    @classmethod
    def _built(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        return cls(
            manifest.n_features, n_classes=manifest.n_classes, sample_shape=manifest.sample_shape, l2=spec.l2,
            width_mult=spec.width,
        )  # fmt: skip

    def _width(self, channels: int) -> int:
        return max(8, round(channels * self.width_mult / 8) * 8)

    def _make_module(self) -> nn.Module:
        in_channels = self.sample_shape[0]
        width = self._width(32)
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False),
            _norm(width),
            nn.ReLU(inplace=True),
        ]
        for out, stride in self.BLOCKS:
            out = self._width(out)
            layers += [
                nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=width, bias=False),  # depthwise
                _norm(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, out, 1, bias=False),  # pointwise
                _norm(out),
                nn.ReLU(inplace=True),
            ]
            width = out
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, self.n_classes)]
        return nn.Sequential(*layers)


class _BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (1x1 projection when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.norm2 = _norm(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), _norm(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(_ImageModel):
    """ResNet-18 (BasicBlock [2, 2, 2, 2]) with a CIFAR-style 3x3 stem, no max-pool, GroupNorm.

    ``width`` is the first stage's channels (64 in the paper); the stages use 1x, 2x, 4x, 8x.
    """

    name = "resnet18"

    def __init__(
        self,
        n_features: int,
        *,
        n_classes: int,
        sample_shape: Sequence[int] | None = None,
        l2: float = 0.0,
        width: int = 64,
    ) -> None:
        if width < 1:
            raise ConfigError(f"model 'resnet18': width must be positive; got {width}")
        self.width = width
        super().__init__(n_features, n_classes=n_classes, sample_shape=sample_shape, l2=l2)

    @classmethod
    def _built(cls, spec: ModelSpec, manifest: Manifest) -> Model:
        return cls(
            manifest.n_features, n_classes=manifest.n_classes, sample_shape=manifest.sample_shape, l2=spec.l2,
            width=max(1, round(64 * spec.width)),
        )  # fmt: skip

    def _make_module(self) -> nn.Module:
        w = self.width
        layers: list[nn.Module] = [
            nn.Conv2d(self.sample_shape[0], w, 3, stride=1, padding=1, bias=False),
            _norm(w),
            nn.ReLU(inplace=True),
        ]
        in_channels = w
        for stage, out in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if stage == 0 else 2
            layers += [_BasicBlock(in_channels, out, stride), _BasicBlock(out, out, 1)]
            in_channels = out
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, self.n_classes)]
        return nn.Sequential(*layers)
