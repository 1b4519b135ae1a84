"""What an exporter reads of a trained model: the exporters depend on this, not on TrainedModel."""

from __future__ import annotations

from typing import Protocol

from lambdaml.arrays import Array
from lambdaml.models import Model
from lambdaml.models.card import ModelCard


class Exportable(Protocol):
    @property
    def card(self) -> ModelCard: ...

    @property
    def params(self) -> Array: ...

    @property
    def model(self) -> Model: ...

    @property
    def name(self) -> str: ...

    @property
    def job_id(self) -> str: ...

    @property
    def n_features(self) -> int: ...

    @property
    def supervised(self) -> bool: ...

    @property
    def is_torch(self) -> bool: ...

    @property
    def classes_(self) -> Array: ...
