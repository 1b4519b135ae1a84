"""Analytic time/cost model of FaaS and IaaS training, calibration profiles and advice (pure Python, no boto3).

- ``Workload``: the model, data and algorithm; ``predict_faas`` / ``predict_iaas``: one configuration.
- ``advise``: every configuration, the Pareto front of time against cost, a recommendation.
- ``load_profile``: the shipped AWS defaults (``aws_defaults.json``), optionally with a profile
  from ``lambdaml calibrate`` (a ``Calibration``) laid over them. Prices are in ``prices.json``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analytic_model.advisor import Advice, advise, pareto_front
    from analytic_model.calibration import Calibration
    from analytic_model.prediction import Prediction, predict_faas, predict_iaas
    from analytic_model.profile import Profile, aws_profile, load_profile
    from analytic_model.workload import Workload

# Imported on first use: a worker that only picks its collective pattern (``pattern_choice``)
# must not pay for the advisor's import on every cold start.
_HOMES = {
    "Advice": "advisor",
    "advise": "advisor",
    "pareto_front": "advisor",
    "Calibration": "calibration",
    "Prediction": "prediction",
    "predict_faas": "prediction",
    "predict_iaas": "prediction",
    "Profile": "profile",
    "aws_profile": "profile",
    "load_profile": "profile",
    "Workload": "workload",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "Advice",
    "Calibration",
    "Prediction",
    "Profile",
    "Workload",
    "advise",
    "aws_profile",
    "load_profile",
    "pareto_front",
    "predict_faas",
    "predict_iaas",
]
