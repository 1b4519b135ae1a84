"""The plug-in catalogue: it names every plug-in the registries load, says what each can do exactly as
the plug-in's own class does, and lets a job be validated without importing any plug-in (torch above all)."""

from __future__ import annotations

import pytest

from lambdaml import catalogue
from lambdaml.algorithms import ALGORITHMS
from lambdaml.backends import BACKENDS
from lambdaml.channels import CHANNELS
from lambdaml.comm import PATTERNS
from lambdaml.compression import COMPRESSORS
from lambdaml.errors import ConfigError
from lambdaml.models import MODELS
from lambdaml.registry import Registry

REGISTRIES: dict[str, Registry[object]] = {
    "model": MODELS,  # type: ignore[dict-item]
    "algorithm": ALGORITHMS,  # type: ignore[dict-item]
    "compressor": COMPRESSORS,  # type: ignore[dict-item]
    "communication pattern": PATTERNS,
    "channel": CHANNELS,  # type: ignore[dict-item]
    "backend": BACKENDS,  # type: ignore[dict-item]
}


def loadable(kind: str, name: str) -> object:
    """The plug-in class itself (a test of a torch plug-in is skipped where torch is missing)."""
    needs = catalogue.KINDS[kind][name].needs
    if needs:
        pytest.importorskip(needs)
    return REGISTRIES[kind].get(name)


@pytest.mark.parametrize("kind", list(catalogue.KINDS))
def test_every_registry_holds_exactly_the_catalogue(kind: str) -> None:
    assert REGISTRIES[kind].names() == sorted(catalogue.KINDS[kind])


@pytest.mark.parametrize("name", list(catalogue.ALGORITHMS))
def test_an_algorithm_can_do_what_the_catalogue_says(name: str) -> None:
    info = catalogue.ALGORITHMS[name]
    cls = loadable("algorithm", name)
    for field in ("supports_async", "reduces_gradients", "compression", "decentralized", "optimizers"):
        assert getattr(cls, field) == getattr(info, field), (name, field)


@pytest.mark.parametrize("name", list(catalogue.COMPRESSORS))
def test_a_compressor_is_stochastic_where_the_catalogue_says(name: str) -> None:
    info = catalogue.COMPRESSORS[name]
    assert loadable("compressor", name).stochastic == info.stochastic  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(catalogue.MODELS))
def test_a_model_is_supervised_where_the_catalogue_says(name: str) -> None:
    info = catalogue.MODELS[name]
    assert loadable("model", name).supervised == info.supervised  # type: ignore[attr-defined]


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown algorithm 'sgd'; known: admm, choco_sgd"):
        catalogue.algorithm("sgd")
    with pytest.raises(ConfigError, match="unknown model"):
        catalogue.model(["not", "a", "name"])  # type: ignore[arg-type]


def test_a_binary_model_refuses_more_than_two_classes_and_others_take_them() -> None:
    with pytest.raises(ConfigError, match="model 'lr' is binary, but dataset 'digits' has 10 classes"):
        catalogue.model("lr").check_classes("digits", 10)
    catalogue.model("lr").check_classes("higgs", 2)
    for name in ("softmax", "multiclass_svm", "mlp", "resnet18", "kmeans"):
        catalogue.model(name).check_classes("digits", 10)
