"""What every part of a job file shares: strict fields, known plug-in names, no literal secrets."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ModelWrapValidatorHandler

from lambdaml import catalogue
from lambdaml.errors import ConfigError
from lambdaml.registry import Registry


def known_name(entries: Mapping[str, catalogue.Plugin], kind: str, name: str) -> str:
    try:
        catalogue.lookup(entries, kind, name)
    except ConfigError as exc:  # reported by pydantic with the field's path
        raise ValueError(str(exc)) from None
    return name


class Spec(BaseModel):
    # strict: "4" or true is not a worker count; a typed job file says what it means
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: Keys that would hold a secret itself. A job file is stored with the job and copied into
#: results, so it may say where a secret is kept (``auth``), never what it is.
_SECRET_FIELDS = frozenset({"password", "passwd", "auth_token", "token", "secret", "credentials", "api_key"})


def refuse_literal_secrets(data: Any) -> Any:
    if isinstance(data, dict):
        found = sorted(str(k) for k in data if str(k).lower() in _SECRET_FIELDS)
        if found:
            raise ValueError(
                f"{found[0]!r}: a secret never goes in the job file; say where it is kept with "
                "auth: {secret_env: VARIABLE} or auth: {secret_id: SECRETS_MANAGER_ARN_OR_NAME}"
            )
    return data


class _Described(Protocol):
    @property
    def spec(self) -> str: ...


S = TypeVar("S", bound=Spec)


class SpecModels(Generic[S]):
    """The job-file model each plug-in of one kind names by path (its description's ``spec``).

    A kind's part of a job file (a channel, an algorithm) is validated with the model of the
    plug-in its ``field`` names, loaded once, so a plug-in's own fields are checked like a
    built-in one's.
    """

    def __init__(self, kind: str, field: str, base: type[S], describe: Callable[[str], _Described]) -> None:
        self.kind, self.field, self.base, self._describe = kind, field, base, describe
        self._loaded: Registry[type[S]] = Registry(f"{kind} spec")

    def model(self, name: str) -> type[S]:
        """The model of the plug-in called ``name`` (loaded from its description's path)."""
        info = self._describe(name)
        if name not in self._loaded:
            self._loaded.register(name, info.spec)
        model = self._loaded.get(name)
        if not (isinstance(model, type) and issubclass(model, self.base)):
            article = "an" if self.base.__name__[0] in "AEIOU" else "a"
            raise ConfigError(f"{self.kind} {name!r}: its spec {info.spec!r} is not {article} {self.base.__name__}")
        return model

    def for_data(self, cls: type[S], data: object) -> type[S]:
        """The model to validate ``data`` with as ``cls``: the named plug-in's, where that is a subclass of ``cls``.

        A name that is unknown, or whose model cannot be loaded, gives ``cls``: validating reports it.
        """
        name = data.get(self.field, cls.model_fields[self.field].default) if isinstance(data, dict) else None
        if not isinstance(name, str):
            return cls
        try:
            model = self.model(name)
        except ConfigError:
            return cls
        return model if issubclass(model, cls) else cls

    def validate(
        self,
        cls: type[S],
        data: Any,
        handler: ModelWrapValidatorHandler[S],
        others_dropped: Callable[[type[S], dict[str, Any]], Mapping[str, object]],
    ) -> S:
        """``data`` validated as the named plug-in's model, without the fields ``others_dropped`` leaves out."""
        model = self.for_data(cls, data)
        if isinstance(data, dict):
            data = others_dropped(model, data)
        if model is not cls:
            return model.model_validate(data)
        return handler(data)
