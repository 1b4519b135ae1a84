"""Models: numpy linear models (binary and multiclass) here; torch models are imported only when chosen."""

from __future__ import annotations

from lambdaml.models.base import Model
from lambdaml.registry import Registry

MODELS: Registry[type[Model]] = Registry("model")
MODELS.register("lr", "lambdaml.models.linear:LogisticRegression")
MODELS.register("svm", "lambdaml.models.linear:LinearSVM")
MODELS.register("softmax", "lambdaml.models.multiclass:SoftmaxRegression")
MODELS.register("multiclass_svm", "lambdaml.models.multiclass:MulticlassSVM")
MODELS.register("kmeans", "lambdaml.models.kmeans:KMeansModel")
# Torch models: imported only when a job names them.
_TORCH_HINT = "install the torch extra: pip install 'lambdaml[torch]'"
MODELS.register("mlp", "lambdaml.models.torch_models:MLP", install_hint=_TORCH_HINT)
MODELS.register("mobilenet", "lambdaml.models.torch_models:MobileNet", install_hint=_TORCH_HINT)
MODELS.register("resnet18", "lambdaml.models.torch_models:ResNet18", install_hint=_TORCH_HINT)

__all__ = ["MODELS", "Model"]
