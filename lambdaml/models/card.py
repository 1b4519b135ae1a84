"""A trained model's card: what its parameter bundle is, so it can be used without the job's dataset.

Rank 0 writes the card (``jobs/<id>/model.json``) beside the bundle (``jobs/<id>/model``) when
a job ends. It holds the model's spec, its input width, its classes as the training file
named them, the dataset version it was trained on and the SHA-256 of the bundle, so a loader
can rebuild the model, refuse a bundle that is not the one described, and refuse a card
written by a newer LambdaML than the one reading it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Any

from lambdaml.errors import CodecError, brief

#: The card and bundle layout this build writes and reads; a newer one is refused by name.
MODEL_FORMAT = 1


@dataclass(frozen=True)
class ModelCard:
    job_id: str
    model: dict[str, Any]  # the job's model spec (name, l2, k, hidden, width ...)
    n_features: int
    n_classes: int
    label_values: list[float] | None  # the file's label of class i, where it differs from i
    sample_shape: list[int] | None  # a row's shape before flattening (images)
    data_format: str  # "dense" or "csr": what the model was trained on
    dataset: str
    dataset_version: str
    n_params: int
    bundle_sha256: str
    format: int = MODEL_FORMAT

    @property
    def name(self) -> str:
        return str(self.model.get("name", ""))

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, what: str) -> ModelCard:
        """The card read from ``what``; a card from a newer LambdaML, or a malformed one, is a CodecError."""
        if not isinstance(data, dict):
            raise CodecError(f"{what} is not a model card: it holds {brief(data)}")
        version = data.get("format")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise CodecError(f"{what} has model format {brief(version)}, expected a positive integer")
        if version > MODEL_FORMAT:
            raise CodecError(
                f"{what} is model format {version}, newer than this LambdaML reads ({MODEL_FORMAT}); "
                "upgrade lambdaml to use it"
            )
        try:
            card = cls(**data)
        except TypeError as exc:
            raise CodecError(f"{what} is not a model card: {exc}") from None
        problem = card._problem()
        if problem:
            raise CodecError(f"{what} is not a valid model card: {problem}")
        return card

    def _problem(self) -> str | None:
        def count(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**62

        for field in ("job_id", "dataset", "dataset_version"):
            if not isinstance(getattr(self, field), str):
                return f"{field} is {brief(getattr(self, field))}, expected a string"
        if not isinstance(self.model, dict) or not isinstance(self.model.get("name"), str):
            return f"model is {brief(self.model)}, expected a model spec with a name"
        if not (count(self.n_features) and count(self.n_classes) and count(self.n_params)):
            return "n_features, n_classes and n_params must be positive integers"
        # Increasing and finite: a label is looked up among them by binary search.
        if self.label_values is not None and (
            not isinstance(self.label_values, list)
            or len(self.label_values) != self.n_classes
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in self.label_values)
            or not all(math.isfinite(v) for v in self.label_values)
            or any(a >= b for a, b in zip(self.label_values, self.label_values[1:], strict=False))
        ):
            return f"label_values is {brief(self.label_values)}, expected one increasing number per class"
        if self.sample_shape is not None and (
            not isinstance(self.sample_shape, list) or not self.sample_shape or not all(map(count, self.sample_shape))
        ):
            return f"sample_shape is {brief(self.sample_shape)}, expected positive integers"
        if self.data_format not in ("dense", "csr"):
            return f"data_format is {brief(self.data_format)}"
        if not (isinstance(self.bundle_sha256, str) and len(self.bundle_sha256) == 64):
            return "bundle_sha256 is not a SHA-256"
        return None


def bundle_hash(bundle: bytes) -> str:
    return hashlib.sha256(bundle).hexdigest()


__all__ = ["MODEL_FORMAT", "ModelCard", "bundle_hash"]
