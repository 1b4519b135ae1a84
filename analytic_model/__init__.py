"""Analytic time/cost model of FaaS and IaaS training, calibration profiles and advice (pure Python, no boto3).

- ``Workload``: the model, data and algorithm; ``predict_faas`` / ``predict_iaas``: one configuration.
- ``advise``: every configuration, the Pareto front of time against cost, a recommendation.
- ``load_profile``: the shipped AWS defaults (``aws_defaults.json``), optionally with a profile
  from ``lambdaml calibrate`` (a ``Calibration``) laid over them. Prices are in ``prices.json``.
"""

from analytic_model.advisor import Advice, advise, pareto_front
from analytic_model.calibration import Calibration
from analytic_model.prediction import Prediction, predict_faas, predict_iaas
from analytic_model.profile import Profile, aws_profile, load_profile
from analytic_model.workload import Workload

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
