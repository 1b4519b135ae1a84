"""``TrainedModel``: a finished job's model, with scikit-learn's ``predict``/``predict_proba``/``score``.

It is the job's own model class (``lambdaml.models``) over the parameters rank 0 saved, so a
prediction here is the computation the job's test accuracy was measured with. Labels come
back as the training file named them (``classes_``); KMeans predicts cluster ids. Exports to
scikit-learn, ONNX and torch are in their own modules and imported only when asked for.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
from pydantic import ValidationError

from lambdaml import catalogue
from lambdaml.arrays import Array
from lambdaml.config import ModelSpec
from lambdaml.data.shards import Manifest
from lambdaml.data.sparse import Features
from lambdaml.errors import ConfigError, DataError
from lambdaml.models import MODELS, Model
from lambdaml.models.card import ModelCard
from lambdaml.trained.inputs import as_features, as_labels

if TYPE_CHECKING:
    from lambdaml.runtime.reports import JobResult

log = logging.getLogger(__name__)

#: What ``export`` writes, and the file suffix of each.
EXPORT_FORMATS = {"onnx": ".onnx", "safetensors": ".safetensors", "npz": ".npz"}


class JobMetrics(TypedDict, total=False):
    """What a job measured (nothing where its result is not known)."""

    loss_curve: list[float]  # the loss after each epoch
    test_accuracy: float | None
    test_loss: float | None
    wall_time_s: float
    cost_dollars: float | None


class TrainedModel:
    """A trained model ready to use: ``predict``, ``predict_proba``, ``decision_function``, ``score``, exports."""

    def __init__(self, card: ModelCard, params: Array, result: JobResult | None = None) -> None:
        if params.shape != (card.n_params,):
            raise DataError(f"model of job {card.job_id} has {params.shape} parameters; its card says {card.n_params}")
        self.card = card
        self.params = params
        self.result = result
        self.model: Model = _build(card)
        if self.model.n_params != card.n_params:
            raise DataError(
                f"model of job {card.job_id}: a {card.name} of this shape has {self.model.n_params} parameters, "
                f"the bundle {card.n_params}"
            )

    # --- what it is ------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The job file's model name: lr, svm, softmax, multiclass_svm, kmeans, mlp ..."""
        return self.card.name

    @property
    def job_id(self) -> str:
        return self.card.job_id

    @property
    def n_features(self) -> int:
        return self.card.n_features

    @property
    def supervised(self) -> bool:
        return self.model.supervised

    @property
    def is_torch(self) -> bool:
        return type(self.model).__module__ == "lambdaml.models.torch_models"

    @property
    def classes_(self) -> Array:
        """The labels it predicts, as the training file wrote them (integers where they all are)."""
        if not self.supervised:
            raise ConfigError(f"model {self.name!r} is a clustering: it predicts cluster ids, not classes")
        values = np.asarray(
            self.card.label_values if self.card.label_values is not None else range(self.card.n_classes),
            dtype=np.float64,
        )
        if np.all(values == np.round(values)):
            return values.astype(np.int64)
        return values

    @property
    def spec(self) -> dict[str, Any]:
        """The job's spec (its job file as JSON), where the result is known; else the model's spec."""
        return dict(self.result.spec) if self.result is not None else {"model": dict(self.card.model)}

    @property
    def metrics(self) -> JobMetrics:
        """What the job measured: its loss per epoch, test accuracy and loss, wall time and cost."""
        if self.result is None:
            return {}
        r = self.result
        return {
            "loss_curve": [point.loss for point in r.loss_curve],
            "test_accuracy": r.test_accuracy,
            "test_loss": r.test_loss,
            "wall_time_s": r.wall_time_s,
            "cost_dollars": r.cost.get("total_dollars"),
        }

    def __repr__(self) -> str:
        classes = f", classes={self.card.n_classes}" if self.supervised else ""
        return f"TrainedModel({self.name!r}, job={self.job_id!r}, features={self.n_features}{classes})"

    # --- using it --------------------------------------------------------------------

    def features(self, X: Any) -> Features:
        """``X`` as the model takes it: float32 rows of its width (CSR kept sparse where the model can)."""
        return as_features(X, self.n_features, dense=self.card.data_format == "dense" or not _takes_csr(self.model))

    def predict(self, X: Any) -> Array:
        """Each row's label (as ``classes_`` names them), or cluster id for KMeans."""
        indices = np.asarray(self.model.predict(self.params, self.features(X))).astype(np.int64)
        return indices if not self.supervised else self.classes_[indices]

    def predict_proba(self, X: Any) -> Array:
        """One column per class of ``classes_``, each row summing to 1 (LR, softmax and the torch models)."""
        return self.model.probabilities(self.params, self.features(X))

    def decision_function(self, X: Any) -> Array:
        """Margins (binary: positive means ``classes_[1]``) or one score per class (multiclass)."""
        return self.model.decision(self.params, self.features(X))

    def score(self, X: Any, y: Any = None) -> float:
        """Accuracy on ``(X, y)``; for KMeans, minus the summed squared distance to the nearest centroid."""
        features = self.features(X)
        if not self.supervised:
            loss, _ = self.model.loss_grad_sum(self.params, features, np.zeros(features.shape[0]))
            return -float(loss)
        labels = self._labels_of(features, y)
        return float(np.mean(self.model.predict(self.params, features) == labels))

    def class_indices(self, y: Any) -> Array:
        """Labels as class ids 0..C-1; a label the model was not trained on is a DataError naming it."""
        labels = as_labels(y)
        classes = self.classes_.astype(np.float64)
        position = np.searchsorted(classes, labels).clip(0, len(classes) - 1)
        unknown = classes[position] != labels
        if unknown.any():
            known = ", ".join(f"{c:g}" for c in classes)
            raise DataError(
                f"label {labels[unknown][0]:g} is not one of the model's classes ({known}); "
                f"{int(unknown.sum())} of {len(labels)} labels are outside them"
            )
        return position.astype(np.float64)

    def mean_loss(self, X: Any, y: Any) -> float:
        """The job's own loss (log loss, hinge, cross-entropy; KMeans: mean squared distance) on ``(X, y)``."""
        features = self.features(X)
        labels = self._labels_of(features, y) if self.supervised else np.zeros(features.shape[0])
        return self.model.mean_loss(self.params, features, labels)

    def _labels_of(self, features: Features, y: Any) -> Array:
        """``y`` as class ids, one per row of ``features``: a single label would broadcast into a wrong score."""
        labels = self.class_indices(y)
        if len(labels) != features.shape[0]:
            given = f"{len(labels)} label" + ("" if len(labels) == 1 else "s")
            raise DataError(f"{given} for {features.shape[0]} rows: give one label per row")
        return labels

    # --- exports ---------------------------------------------------------------------

    @property
    def export_format(self) -> str:
        """The format other tools open best: ONNX for the numpy models, safetensors for torch ones."""
        return "safetensors" if self.is_torch else "onnx"

    def to_sklearn(self) -> Any:
        """A fitted scikit-learn estimator: LogisticRegression, LinearSVC or KMeans."""
        from lambdaml.trained.to_sklearn import to_sklearn

        return to_sklearn(self)

    def to_onnx(self, path: str | Path) -> Path:
        """Write an ONNX graph (numpy models); onnxruntime gives the same labels and probabilities."""
        from lambdaml.trained.to_onnx import write_onnx

        return write_onnx(self, Path(path))

    def to_torch(self) -> Any:
        """The torch models' ``nn.Module`` with the trained weights loaded."""
        from lambdaml.trained.to_torch import to_torch

        return to_torch(self)

    def export(self, path: str | Path, fmt: str) -> Path:
        """Write the model as ``onnx``, ``safetensors`` (torch models) or ``npz`` (the flat parameters)."""
        from lambdaml.trained.to_torch import write_npz, write_safetensors

        if fmt not in EXPORT_FORMATS:
            raise ConfigError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
        path = Path(path)
        if fmt == "onnx":
            return self.to_onnx(path)
        if fmt == "safetensors":
            return write_safetensors(self, path)
        return write_npz(self, path)


def _build(card: ModelCard) -> Model:
    """The job's model class, shaped as it was in training; a card describing no model we build is a DataError."""
    what = f"the model card of job {card.job_id}"
    try:
        spec = ModelSpec.model_validate(card.model)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'model'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise DataError(f"{what} names a model this LambdaML does not build ({problems})") from None
    manifest = Manifest(
        name=card.dataset,
        n_features=card.n_features,
        shard_rows=[1],
        test_rows=0,
        created=0.0,
        dataset_version=card.dataset_version,
        shard_bytes=[0],
        shard_hashes=[""],
        n_classes=card.n_classes,
        sample_shape=card.sample_shape,
        format="dense",  # the rows a model is used on are checked per call (features())
        label_values=card.label_values,
    )
    info, model_class = catalogue.model(spec.name), MODELS.get(spec.name)  # torch missing: its install hint
    try:
        info.check_classes(card.dataset, card.n_classes)
        if info.supervised and card.n_classes < 2:
            raise ConfigError(f"model {spec.name!r} tells classes apart, but the card has only {card.n_classes}")
        return model_class.build(spec, manifest)
    except ConfigError as exc:  # a shape the model cannot take (sample_shape, classes)
        raise DataError(f"{what} describes a model that cannot be built: {exc}") from None


def _takes_csr(model: Model) -> bool:
    """Linear models compute through ``X @ w`` and take CSR rows; KMeans and torch need dense ones."""
    from lambdaml.models.linear import LinearModel
    from lambdaml.models.multiclass import MulticlassLinearModel

    return isinstance(model, LinearModel | MulticlassLinearModel)


__all__ = ["EXPORT_FORMATS", "TrainedModel"]
