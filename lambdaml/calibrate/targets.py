"""What to calibrate: channels on loopback (given endpoints, or services started for the
measurement), or a stack's channels and data bucket, and the start-up of a stack's functions."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from analytic_model.kinds import default_channels
from lambdaml import catalogue
from lambdaml.calibrate.probing import median_time
from lambdaml.config import ChannelSpec, StorageSpec
from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.platforms.aws_lambda.stack import LambdaStack as Stack

DIRECT = "direct"

#: What calibration measures by default: the channels the advisor tries by default.
KINDS = tuple(default_channels())


@contextmanager
def local_channels(
    kinds: Sequence[str], *, endpoint_url: str | None = None, addresses: Mapping[str, str | None] | None = None
) -> Iterator[tuple[dict[str, ChannelSpec], StorageSpec]]:
    """Channel specs on loopback, as each kind's description says: an AWS service on moto (at
    ``endpoint_url``, or started), under fresh names; a server at its address in ``addresses``
    (``HOST:PORT``), or started for the measurement."""
    from lambdaml.local import services

    with ExitStack() as stack:
        if endpoint_url is None:  # S3 is needed anyway: loading a shard is measured from it
            moto = services.start_moto()
            stack.callback(moto.stop)
            endpoint_url = moto.url
        specs: dict[str, ChannelSpec] = {}
        token = secrets.token_hex(3)
        for kind in kinds:
            info = catalogue.channel(kind)
            if kind == DIRECT:  # links on loopback, meeting through a Redis (the one measured, or its own)
                continue
            if info.aws_service is not None:  # the fields naming a stack's resources name fresh ones here
                names = {provided.field: f"lambdaml-calibrate-{token}" for provided in info.stack_fields}
                specs[kind] = ChannelSpec.model_validate({"kind": kind, **names, "endpoint_url": endpoint_url})
            elif info.local_server is not None:
                address = (addresses or {}).get(kind)
                if address is None:
                    service = services.start_channel_server(kind)
                    stack.callback(service.stop)
                    address = f"127.0.0.1:{service.port}"
                host, _, port = address.rpartition(":")
                if not host or not port.isdigit():
                    raise ConfigError(f"--{kind} must be HOST:PORT, got {address!r}")
                specs[kind] = ChannelSpec.model_validate({"kind": kind, "host": host, "port": int(port)})
            else:
                raise ConfigError(f"a {kind} channel cannot be set up here to measure; known: {', '.join(KINDS)}")
        if DIRECT in kinds:
            rendezvous = specs.get("redis")
            if rendezvous is None:
                address = (addresses or {}).get("redis")
                if address is None:
                    service = services.start_channel_server("redis")
                    stack.callback(service.stop)
                    address = f"127.0.0.1:{service.port}"
                host, _, port = address.rpartition(":")
                if not host or not port.isdigit():
                    raise ConfigError(f"--redis must be HOST:PORT, got {address!r}")
                rendezvous = ChannelSpec.model_validate({"kind": "redis", "host": host, "port": int(port)})
            specs[DIRECT] = ChannelSpec.model_validate({"kind": DIRECT, "rendezvous": rendezvous.model_dump()})
        yield specs, StorageSpec(bucket=f"lambdaml-calibrate-data-{token}", endpoint_url=endpoint_url)


def stack_target(name: str, kinds: Sequence[str]) -> tuple[dict[str, ChannelSpec], StorageSpec, bool, Stack]:
    """A stack's channels and data bucket; whether it is a local stack; the stack itself."""
    from lambdaml.backends.stack import resolve_stack

    stack = resolve_stack(name)
    specs: dict[str, ChannelSpec] = {}
    for kind in kinds:
        if kind == DIRECT:  # its links join functions: only they can time them
            raise ConfigError(f"a direct channel's links join a stack's functions: calibrate it here, not on {name!r}")
        cache = stack.environment()
        if catalogue.channel(kind).stack_cache and (cache.cache_kind != kind or cache.cache_host is None):
            raise ConfigError(f"stack {name!r} has no {kind} cache; calibrate the channels it has")
        specs[kind] = ChannelSpec.model_validate({"kind": kind, **stack.channel_fields(kind)})
    storage = StorageSpec(
        bucket=stack.output("DataBucketName"), endpoint_url=stack.endpoints.get("s3"), region=stack.region
    )
    return specs, storage, bool(stack.endpoints), stack


def measure_stack_startup(stack: Stack, repeats: int) -> tuple[float, float, float]:
    """(first invocation, warm invocation, asynchronous Invoke call) of the stack's coordinator.

    The event names no job, so the coordinator answers at once without touching anything.
    """
    client = stack.client("lambda", read_timeout_s=120, max_attempts=1)
    function = stack.output("CoordinatorFunctionName")
    payload = json.dumps({"action": "calibrate"}).encode()

    def call(kind: str) -> None:
        client.invoke(FunctionName=function, InvocationType=kind, Payload=payload)

    try:
        first = median_time(lambda: call("RequestResponse"), 1)
        warm = median_time(lambda: call("RequestResponse"), repeats)
        invoke = median_time(lambda: call("Event"), repeats)
    except Exception as exc:  # botocore's errors: the stack's functions cannot be reached
        raise ConfigError(f"cannot invoke {function} in stack {stack.name!r}: {exc}") from None
    return first, warm, invoke
