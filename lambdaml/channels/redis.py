"""The Redis channel (ElastiCache for Redis): fast, with batch reads and writes.

Values are stored as plain strings (bytes); Redis takes values up to 512 MB, so nothing
is chunked. Listing uses SCAN (never KEYS, which blocks the server).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis as redis_lib
from redis import exceptions as rx
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from lambdaml import credentials, settings
from lambdaml.channels.base import Channel
from lambdaml.channels.kinds.redis import DESCRIPTION, RedisSpec
from lambdaml.errors import ChannelError, ChannelUnavailable, ChannelUnreachable, KeyNotFound, TransientChannelError

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

R = TypeVar("R")

DEFAULT_PORT = 6379
SOCKET_TIMEOUT_S = 30.0  # bounds every command, including a large GET
# redis-py's default retry backs off for seconds on a refused connection; keep it short.
RECONNECT_RETRIES = 2
_GLOB_CHARS = re.compile(r"([*?\[\]\\])")


def escape_glob(prefix: str) -> str:
    """Escape Redis glob characters so a prefix matches only itself."""
    return _GLOB_CHARS.sub(r"\\\1", prefix)


class RedisChannel(Channel):
    """Values as Redis strings; pipelined SETs for batch writes, MGET for batch reads."""

    kind = DESCRIPTION.name
    first_poll_s = 0.0001  # an in-memory store (``Channel.first_poll_s``)
    put_batch = 100

    def __init__(self, client: Any) -> None:
        super().__init__()
        self.client = client
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {}) or {}
        self.endpoint = f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
        self._has_password = bool(kwargs.get("password"))

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> RedisChannel:
        """A client with AUTH from ``spec.auth`` (or LAMBDAML_REDIS_PASSWORD) and TLS when ``spec.tls``."""
        spec = RedisSpec.of(spec)
        username, password = None, settings.get(settings.ENV_REDIS_PASSWORD) or None
        if spec.auth is not None:
            found = credentials.resolve(spec.auth, region=spec.region)
            username, password = found.username, found.password
        tls: dict[str, Any] = {}
        if spec.tls:  # certificates and host names are verified; a private CA may be given
            tls = {"ssl_cert_reqs": "required", "ssl_check_hostname": True, "ssl_ca_certs": spec.tls_ca_file}
        client = redis_lib.Redis(
            host=spec.host,
            port=spec.port or DEFAULT_PORT,
            username=username,
            password=password,
            socket_connect_timeout=spec.connect_timeout_s,
            socket_timeout=SOCKET_TIMEOUT_S,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), RECONNECT_RETRIES),
            ssl=spec.tls,
            **tls,
        )
        return cls(client)

    def describe(self) -> str:
        return f"redis://{self.endpoint}"

    def _call(self, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run one client call, translating redis errors at the boundary."""
        try:
            return fn(*args, **kwargs)
        except rx.BusyLoadingError as exc:
            raise TransientChannelError(f"redis at {self.endpoint} is loading its dataset: {exc}") from exc
        except rx.AuthenticationError as exc:
            if not self._has_password:
                raise ChannelUnavailable(
                    f"redis at {self.endpoint} requires authentication (AUTH): name the password's place in "
                    "channel.auth (secret_env or secret_id)"
                ) from None
            raise ChannelUnavailable(f"redis at {self.endpoint} refused the credentials (AUTH failed: {exc})") from None
        except (rx.ConnectionError, rx.TimeoutError) as exc:
            raise ChannelUnreachable(f"cannot reach redis at {self.endpoint}: {exc}") from exc
        except rx.RedisError as exc:
            raise ChannelError(f"redis {what} failed at {self.endpoint}: {exc}") from exc

    def refuses_anonymous_clients(self) -> bool:
        """PING on a connection of the same endpoint (and TLS) that sends no AUTH: refused means required."""
        pool = self.client.connection_pool
        kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in ("username", "password")}
        anonymous = redis_lib.Redis(connection_pool=redis_lib.ConnectionPool(pool.connection_class, **kwargs))
        try:
            anonymous.ping()
        except rx.AuthenticationError:
            return True
        except rx.ResponseError as exc:  # "NOAUTH Authentication required", from servers that say it so
            if "NOAUTH" in str(exc) or "auth" in str(exc).lower():
                return True
            raise ChannelError(f"redis at {self.endpoint} answered PING with: {exc}") from None
        except (rx.ConnectionError, rx.TimeoutError) as exc:
            raise ChannelUnreachable(f"cannot reach redis at {self.endpoint}: {exc}") from exc
        finally:
            anonymous.close()
        return False

    def _put(self, key: str, data: bytes) -> None:
        self._call(f"SET {key}", self.client.set, key, data)

    def _put_batch(self, items: Sequence[tuple[str, bytes]]) -> None:
        pipe = self.client.pipeline(transaction=False)  # one round trip, no MULTI/EXEC
        for key, data in items:
            pipe.set(key, data)
        self._call(f"pipelined SET of {len(items)} keys", pipe.execute)

    def _get(self, key: str) -> bytes:
        value = self._call(f"GET {key}", self.client.get, key)
        if value is None:
            raise KeyNotFound(f"redis://{self.endpoint}/{key} not found")
        return bytes(value)

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 1000):
            batch = list(keys[start : start + 1000])
            values = self._call(f"MGET of {len(batch)} keys", self.client.mget, batch)
            found.update({k: bytes(v) for k, v in zip(batch, values, strict=True) if v is not None})
        return found

    def _list(self, prefix: str) -> Iterable[str]:
        def scan() -> set[str]:
            # SCAN may return a key more than once while the keyspace is rehashed.
            return {
                k.decode() if isinstance(k, bytes) else str(k)
                for k in self.client.scan_iter(match=escape_glob(prefix) + "*", count=1000)
            }

        return self._call(f"SCAN {prefix!r}", scan)

    def _delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = list(keys[start : start + 1000])
            if batch:
                self._call(f"DEL of {len(batch)} keys", self.client.delete, *batch)

    def ensure(self) -> None:
        """Nothing to create; check the server answers, so a bad endpoint fails at setup."""
        self.ping()

    def ping(self) -> None:
        self._call("PING", self.client.ping)

    def close(self) -> None:
        super().close()
        self.client.close()
