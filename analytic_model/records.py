"""Frozen dataclasses to and from JSON, checked field by field: how profiles are read and written.

A field's type says what its JSON value must be: a non-negative number (``float``, ``int``),
``bool``, ``str``, another record, a ``Mapping[str, ...]`` of them, or any of these ``| None``.
Field metadata adjusts the mapping: ``json_name("lambda")`` renames a field, ``FLAT`` writes
a nested record's fields into its parent's object, ``KEY`` fills a field from the entry's key
in a mapping and ``INTERNAL`` keeps a field out of JSON. A field at its default of None (or of
an empty mapping) is left out: it was not given. Any other None is written as null.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from lambdaml.errors import ConfigError

R = TypeVar("R")

FLAT = {"flat": True}
KEY = {"key": True}
INTERNAL = {"internal": True}


def json_name(name: str) -> dict[str, str]:
    """Metadata for a field stored under another name (a Python keyword, a ``_note``)."""
    return {"json": name}


def _name(f: Field[Any]) -> str:
    return str(f.metadata.get("json", f.name))


def _stored(f: Field[Any]) -> bool:
    return not (f.metadata.get("key") or f.metadata.get("internal"))


@cache
def _hints(cls: Any) -> dict[str, object]:
    """The type of each of a record's fields (a class, or a form such as ``float | None``)."""
    return get_type_hints(cls)


def to_json(record: Any) -> dict[str, object]:
    """A record as plain JSON values."""
    out: dict[str, object] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if not _stored(f) or _left_out(f, value):
            continue
        if f.metadata.get("flat"):
            out.update(to_json(value))
        else:
            out[_name(f)] = _plain(value)
    return out


def _left_out(f: Field[Any], value: Any) -> bool:
    """A field at its default of None or of an empty mapping was not given: it stays out of the file."""
    if f.default is None:
        return value is None
    return f.default_factory is not MISSING and value == f.default_factory()


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _names(cls: type) -> set[str]:
    """The JSON names a record's object may hold (its flat parts' included)."""
    names: set[str] = set()
    for f in fields(cls):
        if f.metadata.get("flat"):
            part = _hints(cls)[f.name]
            assert isinstance(part, type)  # a flat field holds a record
            names |= _names(part)
        elif _stored(f):
            names.add(_name(f))
    return names


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Reader:
    """Reads one profile's records; ``target`` names the profile in what a bad number says."""

    def __init__(self, target: str) -> None:
        self.target = target

    def record(self, cls: type[R], data: Any, path: str = "", **given: Any) -> R:
        """``cls`` from a JSON object; an unknown or missing field, or a bad value, is a one-line ConfigError."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"profile {path or 'file'} must be an object, got {data!r}")
        unknown = sorted(set(data) - _names(cls))
        if unknown:
            raise ConfigError(f"profile {path or 'file'}: unknown field {unknown[0]!r}")
        built: R = self._build(cls, data, path, given)
        return built

    def _build(self, cls: Any, data: Mapping[str, Any], path: str, given: Mapping[str, object]) -> Any:
        hints = _hints(cls)
        values = dict(given)
        for f in fields(cls):
            if f.name in given or not _stored(f):
                continue
            if f.metadata.get("flat"):
                values[f.name] = self._build(hints[f.name], data, path, {})
            elif _name(f) in data:
                values[f.name] = self.value(hints[f.name], data[_name(f)], _join(path, _name(f)))
            elif f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"profile {path or 'file'}: missing field {_name(f)!r}")
        return cls(**values)

    def value(self, hint: Any, value: Any, path: str) -> Any:
        """A JSON value checked against a field's type."""
        origin = get_origin(hint)
        if origin in (Union, types.UnionType):
            if value is None:
                return None
            (inner,) = [arg for arg in get_args(hint) if arg is not type(None)]
            return self.value(inner, value, path)
        if origin is Mapping:
            if not isinstance(value, Mapping):
                raise ConfigError(f"profile {path} must be an object, got {value!r}")
            item = get_args(hint)[1]
            return {str(key): self._item(item, entry, str(key), path) for key, entry in value.items()}
        if isinstance(hint, type) and is_dataclass(hint):
            return self.record(hint, value, path)
        if hint is bool or hint is str:
            if not isinstance(value, hint):
                raise ConfigError(f"profile {self.target!r}: {path} must be {hint.__name__}, got {value!r}")
            return value
        return self.number(value, path, whole=hint is int)

    def _item(self, hint: Any, value: Any, key: str, path: str) -> Any:
        """An entry of a mapping: a record whose ``KEY`` field takes the entry's key, or a plain value."""
        if isinstance(hint, type) and is_dataclass(hint):
            keyed = {f.name: key for f in fields(hint) if f.metadata.get("key")}
            return self.record(hint, value, _join(path, key), **keyed)
        return self.value(hint, value, _join(path, key))

    def number(self, value: Any, path: str, *, whole: bool = False) -> Any:
        """A finite number at least zero (``whole``: an integer, kept as one); otherwise a one-line error."""
        bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0
        if bad or (whole and value != int(value)):
            kind = "a non-negative whole number" if whole else "a non-negative number"
            raise ConfigError(f"profile {self.target!r}: {path} must be {kind}, got {value!r}")
        return int(value) if whole else float(value)
