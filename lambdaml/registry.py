"""One registry type for every plug-in kind (channels, algorithms, models, patterns...).

Entries are either objects or lazy ``"module:attribute"`` strings, so that choosing a
plug-in imports only that plug-in (the numpy path never imports torch).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from lambdaml.errors import ConfigError, UnknownName

if TYPE_CHECKING:
    from lambdaml.catalogue import Plugin

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps a name to a plug-in; rejects duplicates and answers unknown names with the known ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        self._hints: dict[str, str] = {}
        self._catalogue: Mapping[str, Plugin] = {}

    @classmethod
    def of(cls, kind: str, entries: Mapping[str, Plugin]) -> Registry[T]:
        """A registry of every plug-in the catalogue lists under ``kind``, loaded lazily from its path."""
        registry: Registry[T] = cls(kind)
        registry._catalogue = entries  # a plug-in added to the catalogue later is found there
        return registry

    def _from_catalogue(self, name: str) -> None:
        if name not in self._entries and name in self._catalogue:
            entry = self._catalogue[name]
            self._entries[name] = entry.path
            if entry.install_hint:
                self._hints[name] = entry.install_hint

    def register(self, name: str, obj: T | str, *, install_hint: str = "") -> None:
        if name in self._entries:  # a catalogue entry not yet loaded may be given its object
            raise ConfigError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        if install_hint:
            self._hints[name] = install_hint

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plug-in registered for a while, as tests do)."""
        self._entries.pop(name, None)
        self._hints.pop(name, None)

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@REGISTRY.decorator("name")`` registers the decorated object."""

        def wrap(obj: T) -> T:
            self.register(name, obj)
            return obj

        return wrap

    def get(self, name: str) -> T:
        self._from_catalogue(name)
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {known}") from None
        if isinstance(entry, str):
            module_name, _, attr = entry.partition(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                hint = self._hints.get(name, "")
                raise ConfigError(
                    f"{self.kind} {name!r} needs a package that is missing ({exc.name})" + (f": {hint}" if hint else "")
                ) from None
            try:
                loaded: T = getattr(module, attr)
            except AttributeError:
                raise ConfigError(f"{self.kind} {name!r} points at {entry!r}, which does not exist") from None
            self._entries[name] = loaded
            return loaded
        return entry

    def names(self) -> list[str]:
        return sorted({*self._entries, *self._catalogue})

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._catalogue

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
