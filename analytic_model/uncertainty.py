"""How sure a prediction is: the range a measured time or cost falls in, and whether two ranges overlap.

The model's error is stated as ``predicted / measured - 1`` (as ``bench/model_accuracy.py``
measures it). A profile's ``uncertainty`` bounds that error by a fraction f, so a
measurement falls in ``[predicted / (1 + f), predicted / (1 - f)]``: wider above than below.
"""

from __future__ import annotations

from dataclasses import dataclass

from lambdaml.errors import ConfigError

Range = tuple[float, float]


@dataclass(frozen=True)
class Uncertainty:
    """The largest relative error of a predicted time and of a predicted cost (fractions below 1)."""

    time_fraction: float
    cost_fraction: float

    def __post_init__(self) -> None:
        for name in ("time_fraction", "cost_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ConfigError(f"profile uncertainty.{name} must be at least 0 and below 1, got {value!r}")

    def time_range(self, seconds: float) -> Range:
        return _around(seconds, self.time_fraction)

    def cost_range(self, dollars: float) -> Range:
        return _around(dollars, self.cost_fraction)


def _around(predicted: float, fraction: float) -> Range:
    return predicted / (1.0 + fraction), predicted / (1.0 - fraction)


def overlap(a: Range, b: Range) -> bool:
    """Whether two closed ranges share a point."""
    return a[0] <= b[1] and b[0] <= a[1]
