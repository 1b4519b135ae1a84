"""Binding a job file to a stack: its storage and channel point at the stack's resources, and a channel
the stack cannot serve (a cache of another kind, no cache, the in-memory channel) is refused at once,
in one line naming both sides, before the coordinator is invoked."""

from __future__ import annotations

from typing import Any

import pytest

from lambdaml.backends.stack import bind
from lambdaml.errors import ConfigError
from lambdaml.platforms.aws_lambda.stack import LambdaStack as Stack

MOTO = "http://127.0.0.1:5000"
RESOURCES = {"DataBucketName": "data-b", "CommBucketName": "comm-b", "ChannelTableName": "comm-t"}


def local_stack(**outputs: str) -> Stack:
    endpoints = {"s3": MOTO, "dynamodb": MOTO, "cloudformation": MOTO, "lambda": "http://127.0.0.1:5001"}
    return Stack("mc", {**RESOURCES, **outputs}, "us-east-1", endpoints)


def job(kind: str, **channel: Any) -> dict[str, Any]:
    return {"dataset": "d", "workers": 2, "channel": {"kind": kind, **channel}}


MEMCACHED = {"CacheEndpoint": "127.0.0.1:11311", "CacheKind": "memcached"}


@pytest.mark.parametrize(
    ("kind", "outputs", "message"),
    [
        ("redis", MEMCACHED, "stack 'mc': the job's channel is redis, but this stack's cache is memcached"),
        (
            "memcached",
            {"CacheEndpoint": "127.0.0.1:6390", "CacheKind": "redis"},
            "stack 'mc': the job's channel is memcached, but this stack's cache is redis",
        ),
        ("redis", {}, "stack 'mc': the job's channel is redis, but this stack has no cache"),
        ("memory", MEMCACHED, "stack 'mc': the in-memory channel cannot connect Lambda workers"),
    ],
    ids=["redis-on-memcached", "memcached-on-redis", "redis-without-cache", "memory"],
)
def test_a_channel_the_stack_cannot_serve_is_refused_naming_both_kinds(
    kind: str, outputs: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        bind(job(kind), local_stack(**outputs))
    assert str(refused.value).startswith(message), refused.value
    assert "\n" not in str(refused.value)


def test_no_cache_says_how_to_start_a_local_stack_with_one() -> None:
    with pytest.raises(ConfigError, match=r"lambdaml local up --cache memcached\)$"):
        bind(job("memcached"), local_stack())


def test_a_cache_channel_of_the_stacks_kind_is_pointed_at_its_cache() -> None:
    bound = bind(job("memcached", host="10.1.2.3", port=1), local_stack(**MEMCACHED))
    assert (bound.channel.host, bound.channel.port, bound.channel.tls) == ("127.0.0.1", 11311, False)
    assert bound.storage.bucket == "data-b" and bound.storage.endpoint_url == MOTO


def test_on_aws_a_redis_channel_speaks_tls_with_the_stacks_auth_secret() -> None:
    outputs = {**RESOURCES, "CacheEndpoint": "master.x.cache.amazonaws.com:6379", "CacheKind": "redis"}
    outputs["CacheAuthSecretArn"] = "arn:aws:secretsmanager:us-east-1:123456789012:secret:auth"
    bound = bind(job("redis"), Stack("prod", outputs))
    channel = bound.channel
    assert (channel.host, channel.port, channel.tls) == ("master.x.cache.amazonaws.com", 6379, True)
    assert channel.auth is not None and channel.auth.secret_id == outputs["CacheAuthSecretArn"]


@pytest.mark.parametrize("kind", ["s3", "dynamodb"])
def test_the_storage_channels_need_no_cache(kind: str) -> None:
    bound = bind(job(kind), local_stack())
    assert bound.channel.kind == kind and bound.channel.endpoint_url == MOTO
    assert (bound.channel.bucket if kind == "s3" else bound.channel.table) == ("comm-b" if kind == "s3" else "comm-t")


def test_the_stacks_environment_is_read_from_its_outputs() -> None:
    environment = local_stack(**MEMCACHED, WorkerFunctionName="w").environment()
    assert (environment.data_bucket, environment.cache_kind, environment.cache_port) == ("data-b", "memcached", 11311)
    assert environment.worker_function == "w" and environment.in_a_stack and not environment.cache_tls
