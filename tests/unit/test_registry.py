"""The plug-in registry: lookups, helpful unknown-name errors, lazy imports with install hints."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lambdaml.errors import ConfigError, UnknownName
from lambdaml.registry import Registry


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh importable module that counts how often it is imported."""
    name = f"lml_test_plugin_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "import builtins\n"
        "builtins.LML_PLUGIN_IMPORTS = getattr(builtins, 'LML_PLUGIN_IMPORTS', 0) + 1\n"
        "class Plugin:\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.LML_PLUGIN_IMPORTS", 0, raising=False)
    yield name
    sys.modules.pop(name, None)


def _imports() -> int:
    import builtins

    return int(builtins.LML_PLUGIN_IMPORTS)  # type: ignore[attr-defined]


def test_register_and_get_returns_the_object() -> None:
    reg: Registry[object] = Registry("widget")
    a, b = object(), object()
    reg.register("a", a)
    reg.register("b", b)
    assert reg.get("a") is a
    assert reg.get("b") is b


def test_decorator_registers_and_returns_the_object() -> None:
    reg: Registry[type] = Registry("widget")

    @reg.decorator("thing")
    class Thing:
        pass

    assert reg.get("thing") is Thing
    assert Thing.__name__ == "Thing"  # the decorator returned the class itself


def test_duplicate_name_is_rejected() -> None:
    reg: Registry[object] = Registry("channel")
    first = object()
    reg.register("s3", first)
    with pytest.raises(ConfigError, match="channel 's3' is already registered"):
        reg.register("s3", object())
    with pytest.raises(ConfigError, match="already registered"):
        reg.register("s3", "json:dumps")  # a lazy entry is a duplicate too
    assert reg.get("s3") is first  # the original survives


def test_unknown_name_lists_the_known_names_sorted() -> None:
    reg: Registry[object] = Registry("algorithm")
    for name in ("zeta", "alpha", "mid", "ga_sgd"):
        reg.register(name, object())
    with pytest.raises(UnknownName) as info:
        reg.get("foo")
    message = str(info.value)
    assert message == "unknown algorithm 'foo'; known: alpha, ga_sgd, mid, zeta"


def test_unknown_name_is_a_config_error_and_a_key_error_without_quotes() -> None:
    reg: Registry[object] = Registry("model")
    with pytest.raises(UnknownName) as info:
        reg.get("cnn")
    assert isinstance(info.value, ConfigError)
    assert isinstance(info.value, KeyError)
    assert str(info.value) == "unknown model 'cnn'; known: none"
    assert not str(info.value).startswith('"')


def test_lazy_entry_resolves_to_the_attribute_itself() -> None:
    reg: Registry[object] = Registry("encoder")
    reg.register("json", "json:dumps")
    assert reg.get("json") is json.dumps
    assert reg.get("json") is json.dumps  # cached, still the same object


def test_lazy_entry_is_imported_only_on_get(plugin_module: str) -> None:
    reg: Registry[type] = Registry("plugin")
    reg.register("p", f"{plugin_module}:Plugin")
    assert plugin_module not in sys.modules
    assert "p" in reg and reg.names() == ["p"]  # asking about names imports nothing
    assert plugin_module not in sys.modules
    assert _imports() == 0

    loaded = reg.get("p")
    assert plugin_module in sys.modules
    assert loaded is sys.modules[plugin_module].Plugin
    assert _imports() == 1


def test_lazy_entry_is_resolved_once(plugin_module: str) -> None:
    reg: Registry[type] = Registry("plugin")
    reg.register("p", f"{plugin_module}:Plugin")
    first = reg.get("p")
    sys.modules.pop(plugin_module)  # a second import would create a new class and count again
    assert reg.get("p") is first
    assert _imports() == 1


def test_missing_module_gives_config_error_with_install_hint() -> None:
    reg: Registry[object] = Registry("channel")
    hint = "pip install 'lambdaml[torch]'"
    reg.register("torchy", "lml_no_such_module_xyz.sub:Thing", install_hint=hint)
    with pytest.raises(ConfigError) as info:
        reg.get("torchy")
    message = str(info.value)
    assert not isinstance(info.value, UnknownName)
    assert "channel 'torchy'" in message
    assert "lml_no_such_module_xyz" in message
    assert message.endswith(hint)
    # a failed import is not cached as a success: it fails the same way again
    with pytest.raises(ConfigError, match="lml_no_such_module_xyz"):
        reg.get("torchy")


def test_missing_module_without_hint_has_no_dangling_colon() -> None:
    reg: Registry[object] = Registry("channel")
    reg.register("x", "lml_no_such_module_xyz:Thing")
    with pytest.raises(ConfigError) as info:
        reg.get("x")
    assert str(info.value) == "channel 'x' needs a package that is missing (lml_no_such_module_xyz)"


def test_missing_dependency_inside_an_existing_module_names_the_dependency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lml_test_needs_dep.py").write_text("import lml_absent_dependency_q\nThing = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[object] = Registry("model")
    reg.register("m", "lml_test_needs_dep:Thing", install_hint="pip install absent")
    try:
        with pytest.raises(ConfigError, match=r"\(lml_absent_dependency_q\): pip install absent"):
            reg.get("m")
    finally:
        sys.modules.pop("lml_test_needs_dep", None)


def test_lazy_entry_with_missing_attribute_is_a_config_error() -> None:
    reg: Registry[object] = Registry("model")
    reg.register("bad", "json:no_such_attribute")
    with pytest.raises(ConfigError, match="no_such_attribute"):
        reg.get("bad")


def test_names_contains_and_iteration_are_sorted() -> None:
    reg: Registry[object] = Registry("pattern")
    reg.register("scatter_reduce", object())
    reg.register("allreduce", "json:dumps")
    reg.register("ring", object())
    assert reg.names() == ["allreduce", "ring", "scatter_reduce"]
    assert list(reg) == ["allreduce", "ring", "scatter_reduce"]
    assert "ring" in reg
    assert "RING" not in reg
    assert "gossip" not in reg
    assert 3 not in reg


def test_registries_are_independent() -> None:
    one: Registry[object] = Registry("one")
    two: Registry[object] = Registry("two")
    one.register("x", 1)
    assert "x" not in two
    with pytest.raises(UnknownName, match="unknown two 'x'"):
        two.get("x")
