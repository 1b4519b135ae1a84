"""Session fixtures that run REAL local services (moto, redis-server, memcached) on free loopback ports.

Each service starts on first use and stops at the end of the session, so a run that only
needs the memory channel starts nothing. Nothing here talks to AWS: every endpoint is
127.0.0.1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from lambdaml import settings
from lambdaml.channels import Channel, open_channel
from lambdaml.cli import output
from lambdaml.config import StorageSpec
from lambdaml.local import services as local
from lambdaml.storage import open_storage
from tests.helpers import CHANNEL_KINDS, Services, channel_spec, unique_name


def _serve(start: Callable[..., local.Service], factory: pytest.TempPathFactory, name: str) -> Iterator[local.Service]:
    try:
        service = start(log_path=factory.mktemp(name) / f"{name}.log")
    except local.ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server (S3, DynamoDB, ...) on a free loopback port."""
    for service in _serve(local.start_moto, tmp_path_factory, "moto"):
        yield service.url


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server without persistence on a free loopback port."""
    for service in _serve(local.start_redis, tmp_path_factory, "redis"):
        yield service.port


@pytest.fixture(scope="session")
def memcached_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A memcached with the default 1 MiB item limit (so chunking is exercised) on a free loopback port."""
    for service in _serve(local.start_memcached, tmp_path_factory, "memcached"):
        yield service.port


@pytest.fixture(scope="session")
def services(moto_url: str, redis_port: int, memcached_port: int) -> Services:
    """Every local service, started once per session."""
    return Services(moto_url=moto_url, redis_port=redis_port, memcached_port=memcached_port)


def _services_for(kind: str, request: pytest.FixtureRequest) -> Services | None:
    """Start only the service a channel kind needs (the others get placeholders)."""
    if kind == "memory":
        return None
    moto = request.getfixturevalue("moto_url") if kind in ("s3", "dynamodb") else ""
    redis = request.getfixturevalue("redis_port") if kind == "redis" else 0
    memcached = request.getfixturevalue("memcached_port") if kind == "memcached" else 0
    return Services(moto_url=moto, redis_port=redis, memcached_port=memcached)


@pytest.fixture(scope="session", autouse=True)
def _lambdaml_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This machine's job records, logs and local stacks go to a folder of the test session's
    (subprocesses inherit it), never into the real ~/.lambdaml."""
    patch = pytest.MonkeyPatch()
    patch.setenv(settings.ENV_HOME, str(tmp_path_factory.mktemp("lambdaml-home")))
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _progress_on_stdout() -> Iterator[None]:
    """A command points the CLI's progress lines where it needs them (stderr under JSON output,
    nowhere under -q) for the rest of its process: in the one test process, put them back."""
    yield
    output.configure(quiet=False, json=False)


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own, so tests sharing a redis or memcached never collide."""
    return unique_name("t") + "/"


@pytest.fixture(params=CHANNEL_KINDS)
def channel(request: pytest.FixtureRequest, prefix: str) -> Iterator[Channel]:
    """An ensured channel of each kind; s3/dynamodb get a fresh bucket/table, the rest a clean prefix."""
    kind: str = request.param
    chan = open_channel(channel_spec(kind, _services_for(kind, request)))
    chan.ensure()
    try:
        yield chan
    finally:
        with contextlib.suppress(Exception):  # best effort: the test's verdict is already in
            chan.clear(prefix)
        chan.close()


@pytest.fixture(scope="module")
def data_store(services: Services) -> tuple[StorageSpec, Channel]:
    """A fresh data bucket on moto for one test module: its spec and the store."""
    spec = StorageSpec(bucket=unique_name("data"), endpoint_url=services.moto_url)
    store = open_storage(spec)
    store.ensure()
    return spec, store
