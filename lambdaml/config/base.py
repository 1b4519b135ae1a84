"""What every part of a job file shares: strict fields, known plug-in names, no literal secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from lambdaml import catalogue
from lambdaml.errors import ConfigError


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
