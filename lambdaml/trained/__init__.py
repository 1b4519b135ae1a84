"""Trained models: load a finished job's model, use it (predict, score) and export it.

Command-line and notebook code: never imported by workers, so the exports' packages
(scikit-learn, onnx, safetensors) stay out of the Lambda zip's path.
"""

from __future__ import annotations

from lambdaml.trained.load import load_model, read_model
from lambdaml.trained.model import EXPORT_FORMATS, TrainedModel

__all__ = ["EXPORT_FORMATS", "TrainedModel", "load_model", "read_model"]
