"""Backend failures become lambdaml errors at the channel boundary, quickly and naming the endpoint.

Unreachable endpoints are real sockets on 127.0.0.1 (a closed port, and a listener whose
accept queue is full so connects time out). Service-side errors use botocore's Stubber or
small fake clients, so no service needs to run (S3's values: ``test_s3_objects.py``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from botocore.stub import Stubber
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheUnexpectedCloseError
from redis import exceptions as rx

from lambdaml import aws
from lambdaml.channels import Channel, memcached_io, open_channel
from lambdaml.channels.dynamodb import DynamoDBChannel
from lambdaml.channels.memcached import MemcachedChannel
from lambdaml.channels.redis import RedisChannel
from lambdaml.config import ChannelKind, ChannelSpec
from lambdaml.errors import ChannelError, ChannelUnavailable, KeyNotFound, TransientChannelError

pytestmark = pytest.mark.timeout(60)

NETWORK_KINDS: list[ChannelKind] = ["s3", "dynamodb", "redis", "memcached"]


def _spec(kind: ChannelKind, port: int) -> ChannelSpec:
    if kind in ("s3", "dynamodb"):
        endpoint = f"http://127.0.0.1:{port}"
        return ChannelSpec(
            kind=kind, bucket="comm-unreachable", table="comm-unreachable", endpoint_url=endpoint, connect_timeout_s=1.0
        )
    return ChannelSpec(kind=kind, host="127.0.0.1", port=port, connect_timeout_s=1.0)


def _operations(chan: Channel) -> dict[str, Callable[[], object]]:
    return {
        "get": lambda: chan.get("comm/x/probe"),
        "put": lambda: chan.put("comm/x/probe", b"1"),
        "list": lambda: chan.list("comm/x/"),
        "get_many": lambda: chan.get_many(["comm/x/a", "comm/x/b"]),
        "ensure": chan.ensure,
    }


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A loopback port that accepts no more connections: connects to it time out instead of failing fast."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    fillers = []
    for _ in range(4):  # fill the accept queue; later SYNs are dropped
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.1)
    yield port
    for filler in fillers:
        filler.close()
    server.close()


@pytest.mark.parametrize("kind", NETWORK_KINDS)
def test_refused_endpoint_is_unavailable_fast(kind: ChannelKind) -> None:
    chan = open_channel(_spec(kind, 1))
    for name, operation in _operations(chan).items():
        started = time.monotonic()
        with pytest.raises(ChannelUnavailable) as info:
            operation()
        assert time.monotonic() - started < 5.0, f"{kind} {name} took too long to fail"
        assert "127.0.0.1:1" in str(info.value), f"{kind} {name}: {info.value}"
        assert "\n" not in str(info.value)
    chan.close()


@pytest.mark.parametrize("kind", NETWORK_KINDS)
def test_connect_timeout_is_unavailable_and_bounded(kind: ChannelKind, black_hole: int) -> None:
    chan = open_channel(_spec(kind, black_hole))
    started = time.monotonic()
    with pytest.raises(ChannelUnavailable) as info:
        chan.get("comm/x/probe")
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 10.0  # at least one 1 s connect timeout, at most a few retries of it
    assert f"127.0.0.1:{black_hole}" in str(info.value)
    chan.close()


# ---- DynamoDB ----------------------------------------------------------------------


def _dynamodb() -> tuple[DynamoDBChannel, Stubber]:
    client = aws.client("dynamodb", endpoint_url="http://127.0.0.1:1")
    return DynamoDBChannel(client, "comm-table"), Stubber(client)


def test_dynamodb_missing_table_names_the_table() -> None:
    chan, stub = _dynamodb()
    stub.add_client_error("get_item", service_error_code="ResourceNotFoundException", http_status_code=400)
    with stub, pytest.raises(ChannelError, match="comm-table") as info:
        chan.get("comm/a")
    assert not isinstance(info.value, KeyNotFound)


def test_dynamodb_throttling_is_retried() -> None:
    chan, stub = _dynamodb()
    stub.add_client_error("get_item", service_error_code="ProvisionedThroughputExceededException", http_status_code=400)
    stub.add_response("get_item", {"Item": {"k": {"S": "comm/a"}, "v": {"B": b"value"}}})
    with stub:
        assert chan.get("comm/a") == b"value"
        stub.assert_no_pending_responses()


def test_dynamodb_batch_get_follows_unprocessed_keys() -> None:
    chan, stub = _dynamodb()
    item = {"k": {"S": "comm/a"}, "v": {"B": b"A"}}
    stub.add_response(
        "batch_get_item",
        {
            "Responses": {"comm-table": [item]},
            "UnprocessedKeys": {"comm-table": {"Keys": [{"k": {"S": "comm/b"}}], "ConsistentRead": True}},
        },
    )
    stub.add_response("batch_get_item", {"Responses": {"comm-table": [{"k": {"S": "comm/b"}, "v": {"B": b"B"}}]}})
    with stub:
        assert chan.get_many(["comm/a", "comm/b", "comm/missing"]) == {"comm/a": b"A", "comm/b": b"B"}
        stub.assert_no_pending_responses()


def test_dynamodb_refuses_an_item_limit_over_400kb() -> None:
    with pytest.raises(ChannelError, match="400 KB"):
        DynamoDBChannel(object(), "comm-table", max_item_bytes=500_000)


# ---- Redis and Memcached -----------------------------------------------------------


class _FakeRedis:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors

    def get(self, key: str) -> bytes:
        if self.errors:
            raise self.errors.pop(0)
        return b"value"


def test_redis_errors_are_translated() -> None:
    assert RedisChannel(_FakeRedis([rx.BusyLoadingError("loading")])).get("comm/a") == b"value"  # retried
    with pytest.raises(ChannelError, match="WRONGTYPE") as info:
        RedisChannel(_FakeRedis([rx.ResponseError("WRONGTYPE not a string")])).get("comm/a")
    assert not isinstance(info.value, TransientChannelError | ChannelUnavailable)
    # A server that stops answering is given ``reconnect_s`` to come back (a restart) ...
    assert RedisChannel(_FakeRedis([rx.TimeoutError("timed out")] * 2)).get("comm/a") == b"value"
    # ... and is unavailable after that.
    gone = RedisChannel(_FakeRedis([rx.TimeoutError("timed out")] * 1000))
    gone.reconnect_s = 0.1
    started = time.monotonic()
    with pytest.raises(ChannelUnavailable, match="cannot reach redis"):
        gone.get("comm/a")
    assert 0.1 <= time.monotonic() - started < 2


class _RefusingMemcache:
    """A memcached client whose sets are refused (as when the server is out of memory)."""

    def set(self, key: str, value: bytes, noreply: bool | None = None) -> bool:
        return False

    def set_many(self, values: dict[str, bytes], noreply: bool | None = None) -> list[str]:
        return [key for key in values if key.endswith("b")]


def test_memcached_refused_set_is_an_error() -> None:
    chan = MemcachedChannel(_RefusingMemcache(), ("127.0.0.1", 1))
    with pytest.raises(ChannelError, match="did not store"):
        chan.put("comm/a", b"x")
    with pytest.raises(ChannelError, match=r"did not store 1 of 2 keys \(first: comm/b\)"):
        chan.put_many([("comm/a", b"x"), ("comm/b", b"y")])


def test_memcached_sets_survive_partial_sends() -> None:
    # A small send buffer makes sendmsg send part of the buffers each call: all must arrive, in order.
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.settimeout(10.0)  # as the client's sockets are: sendmsg then returns after a partial send
    values = [os.urandom(n) for n in (70_000, 0, 1, 300_000, 12)]
    received = bytearray()

    def read() -> None:
        while chunk := theirs.recv(1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with ours:
        memcached_io.send_all(ours, [*values, memoryview(values[3])[5:9]])
    reader.join()
    theirs.close()
    assert bytes(received) == b"".join(values) + values[3][5:9]


def _replying_client(reply: bytes, piece: int) -> tuple[Client, threading.Thread]:
    """A pymemcache client on one end of a socket pair; the other end sends ``reply`` ``piece``
    bytes at a time, then closes."""
    ours, theirs = socket.socketpair()
    ours.settimeout(10.0)
    client = Client(("127.0.0.1", 1))
    client.sock = ours

    def serve() -> None:
        with theirs:
            theirs.recv(1 << 16)  # the command
            for start in range(0, len(reply), piece):
                theirs.sendall(reply[start : start + piece])

    server = threading.Thread(target=serve)
    server.start()
    return client, server


@pytest.mark.parametrize("piece", [1, 3, 1 << 16])
def test_memcached_gets_read_values_into_the_callers_buffers(piece: int) -> None:
    body = os.urandom(100_000)
    reply = b"VALUE a 0 5\r\nhello\r\nVALUE b 0 %d\r\n%s\r\nEND\r\n" % (len(body), body)
    client, server = _replying_client(reply, piece)
    head, tail = bytearray(10), bytearray(len(body) - 10)
    buffers = {"a": [memoryview(bytearray(5))], "b": [memoryview(head), memoryview(tail)]}
    assert memcached_io.get_into(client, ["a", "missing", "b"], lambda key, n: buffers[key]) == ["a", "b"]
    server.join()
    client.close()
    assert bytes(buffers["a"][0]) == b"hello" and bytes(head + tail) == body


def test_memcached_get_cut_off_mid_value_fails_and_drops_the_connection() -> None:
    client, server = _replying_client(b"VALUE a 0 50\r\n" + b"x" * 20, 7)
    with pytest.raises(MemcacheUnexpectedCloseError):
        memcached_io.get_into(client, ["a"], lambda key, n: [memoryview(bytearray(n))])
    server.join()
    assert client.sock is None  # never reused with a reply half read


def test_memcached_value_over_the_servers_limit_is_refused(memcached_port: int, prefix: str) -> None:
    spec = ChannelSpec(kind="memcached", host="127.0.0.1", port=memcached_port)
    with open_channel(spec) as chan:
        assert isinstance(chan, MemcachedChannel)
        chan.max_item_bytes = None  # unchunked: the server's own 1 MiB limit refuses it
        with pytest.raises(ChannelError, match="object too large"):
            chan.put(prefix + "too-large", os.urandom(2 << 20))
        chan.put(prefix + "fits", b"still usable")  # the refused set's connection was not reused half-read
        assert chan.get(prefix + "fits") == b"still usable"
        chan.delete([prefix + "fits"])
