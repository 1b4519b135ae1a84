"""Channel credentials, read where the job file says they are kept, never from the job file.

``channel.auth`` names an environment variable (``secret_env``) or an AWS Secrets Manager
secret (``secret_id``, a name or an ARN). The secret is the password itself, or a JSON object
with ``password`` and optionally ``username`` (what Secrets Manager's generated secrets and
the template's Redis token look like). The value lives only in the client that uses it: it
is not logged, not put in any error message, and not part of the job spec that is stored
with the job and copied into its result.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.config import AuthSpec

log = logging.getLogger(__name__)

# botocore logs every response body at DEBUG, a GetSecretValue answer included: while this
# thread reads a secret, that one logger's records are dropped (records are filtered in the
# thread that logs them, so other threads' logging is untouched).
_reading_secret = threading.local()


class _HideSecretResponses(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_reading_secret, "active", False)


logging.getLogger("botocore.parsers").addFilter(_HideSecretResponses())


@dataclass(frozen=True)
class Credentials:
    username: str | None
    password: str = field(repr=False)  # never in a repr, a log line or a traceback's locals display

    def __str__(self) -> str:
        return f"credentials of {self.username or 'the default user'}"


def resolve(auth: AuthSpec, *, region: str) -> Credentials:
    """Read the credentials ``auth`` points at; a missing or malformed secret is a ConfigError."""
    if auth.secret_env is not None:
        where = f"environment variable {auth.secret_env}"
        value = os.environ.get(auth.secret_env)
        if not value:
            raise ConfigError(f"channel.auth.secret_env: the {where} is not set (or empty)")
    else:
        assert auth.secret_id is not None  # AuthSpec requires exactly one source
        where = f"secret {auth.secret_id!r}"
        value = _from_secrets_manager(auth.secret_id, auth.endpoint_url, auth.region or region)
    log.debug("channel credentials read from the %s", where)
    return _parse(value, auth.username, where)


def _parse(value: str, username: str | None, where: str) -> Credentials:
    password: object = value
    if value.lstrip().startswith("{"):
        try:
            data = json.loads(value)
        except ValueError:
            raise ConfigError(f"channel.auth: the {where} starts like JSON but is not valid JSON") from None
        password = data.get("password") if isinstance(data, dict) else None
        stored_user = data.get("username") if isinstance(data, dict) else None
        if isinstance(stored_user, str) and stored_user and username is None:
            username = stored_user
    if not isinstance(password, str) or not password:
        raise ConfigError(f"channel.auth: the {where} holds no password (a string, or JSON with a 'password')")
    return Credentials(username, password)


def _from_secrets_manager(secret_id: str, endpoint_url: str | None, region: str) -> str:
    from botocore.exceptions import BotoCoreError, ClientError

    from lambdaml import aws
    from lambdaml.aws_errors import error_code, translate_botocore

    client = aws.client("secretsmanager", endpoint_url=endpoint_url, region=region, read_timeout_s=10)
    endpoint, what = endpoint_url or f"secretsmanager.{region}", f"reading {secret_id!r}"
    _reading_secret.active = True
    try:
        answer = client.get_secret_value(SecretId=secret_id)
    except ClientError as exc:
        code = error_code(exc)
        if code == "ResourceNotFoundException":
            raise ConfigError(
                f"channel.auth.secret_id: Secrets Manager ({region}) has no secret {secret_id!r}"
            ) from None
        if code in ("AccessDeniedException", "AccessDenied"):
            raise ConfigError(f"channel.auth.secret_id: not allowed to read secret {secret_id!r} ({code})") from None
        raise translate_botocore(exc, service="secretsmanager", endpoint=endpoint, what=what) from None
    except (BotoCoreError, ConnectionError) as exc:
        raise translate_botocore(exc, service="secretsmanager", endpoint=endpoint, what=what) from None
    finally:
        _reading_secret.active = False
    value = answer.get("SecretString")
    if not isinstance(value, str):
        raise ConfigError(f"channel.auth.secret_id: secret {secret_id!r} holds binary data; store the password as text")
    return value
