"""Opening a sealed value as a view, or as a head with the rest read into place: the same value and
the same refusals as opening it as bytes; and a value damaged on its way from the store is read
again, while a wrong one still fails."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lambdaml.buffers import Placed
from lambdaml.channels.base import Backoff, Piece
from lambdaml.channels.memory import MemoryChannel
from lambdaml.channels.redis import RedisChannel
from lambdaml.channels.sealed import SealedChannel
from lambdaml.errors import CodecError
from lambdaml.seal import OVERHEAD, Sealer, new_secret


@pytest.mark.parametrize("secret", [None, new_secret()], ids=["bound", "mac"])
def test_open_view_is_the_value_read_only_and_refuses_what_open_refuses(secret: bytes | None) -> None:
    sealer = Sealer(secret)
    sealed = sealer.seal("job/r1/k", b"payload " * 1000)
    view = sealer.open_view("job/r1/k", sealed)
    assert bytes(view) == sealer.open("job/r1/k", sealed) == b"payload " * 1000
    assert view.readonly and view.obj is sealed  # no copy: a view into what was read
    for key, value in (("job/r2/k", sealed), ("job/r1/k", sealed[:-1] + b"X"), ("job/r1/k", sealed[:10])):
        if secret is None and value is not sealed and len(value) == len(sealed):
            continue  # without a MAC only the key is bound: a changed byte is the codec's to catch
        for opener in (sealer.open, sealer.open_view):
            with pytest.raises(CodecError):
                opener(key, value)


@pytest.mark.parametrize("secret", [None, new_secret()], ids=["bound", "mac"])
def test_open_placed_checks_the_seal_over_the_head_and_the_rest(secret: bytes | None) -> None:
    sealer = Sealer(secret)
    sealed = sealer.seal("job/r1/k", b"head" + b"rest" * 1000)
    head, rest = sealed[: OVERHEAD + 4], memoryview(bytearray(sealed[OVERHEAD + 4 :]))
    assert bytes(sealer.open_placed("job/r1/k", head, rest)) == b"head"
    with pytest.raises(CodecError, match=r"another key|MAC"):
        sealer.open_placed("job/r2/k", head, rest)
    rest[7] ^= 1
    if secret is None:  # only the key is bound: a changed byte is the codec's to catch
        assert bytes(sealer.open_placed("job/r1/k", head, rest)) == b"head"
    else:
        with pytest.raises(CodecError, match="MAC"):
            sealer.open_placed("job/r1/k", head, rest)


class _DamagesFirstRead(MemoryChannel):
    """A store that hands the first read of each key a damaged body, as moto's S3 can under
    concurrent requests: empty, or the value from somewhere in its middle."""

    def __init__(self, damage: Callable[[bytes], bytes]) -> None:
        super().__init__()
        self.damage = damage
        self.read: set[str] = set()

    def _get(self, key: str) -> bytes:
        value = super()._get(key)
        if key in self.read:
            return value
        self.read.add(key)
        return self.damage(value)


@pytest.mark.parametrize("damage", [lambda v: b"", lambda v: v[len(v) // 3 :]], ids=["empty", "tail"])
@pytest.mark.parametrize("secret", [None, new_secret()], ids=["bound", "mac"])
def test_a_value_damaged_on_the_way_is_read_again_and_a_wrong_one_still_fails(
    damage: Callable[[bytes], bytes], secret: bytes | None
) -> None:
    inner = _DamagesFirstRead(damage)
    channel = SealedChannel(inner, Sealer(secret))
    channel.put_many([("job/r1/a", b"a" * 1000), ("job/r1/b", b"b" * 1000)])
    assert channel.get("job/r1/a") == b"a" * 1000
    assert {k: bytes(v) for k, v in channel.wait_for_views(["job/r1/b"], timeout=5).items()} == {
        "job/r1/b": b"b" * 1000
    }
    channel.put_packed("job/r1/packed", [("job/r1/p0", b"x" * 300), ("job/r1/p1", b"y" * 500)])
    pieces = [Piece("job/r1/packed", f"job/r1/p{i}", i, 2, (300, 500)) for i in range(2)]
    assert {k: bytes(v) for k, v in channel.wait_for_packed_views(pieces, timeout=5).items()} == {
        "job/r1/p0": b"x" * 300,
        "job/r1/p1": b"y" * 500,
    }
    channel.put_many([("job/r1/c", b"h" * 8 + b"c" * 992)])
    body = memoryview(bytearray(992))
    placed = channel.wait_for_into({"job/r1/c": (8, body)}, timeout=5)["job/r1/c"]
    assert isinstance(placed, Placed) and bytes(placed.head) == b"h" * 8 and bytes(body) == b"c" * 992
    # A value written under another key reads the same the second time: the failure stands.
    inner.put("job/r2/a", inner.get("job/r1/a"))
    with pytest.raises(CodecError, match="job/r2/a"):
        channel.get("job/r2/a")
    with pytest.raises(CodecError, match="job/r2/a"):
        channel.wait_for_into({"job/r2/a": (8, memoryview(bytearray(992)))}, timeout=5)


def test_a_sealed_channel_polls_on_the_schedule_of_the_channel_it_wraps() -> None:
    redis = RedisChannel(client=object())  # no requests are made: only its class figures are read
    assert SealedChannel(redis, Sealer(new_secret())).backoff() == redis.backoff() == Backoff(initial_s=0.0001)
    assert SealedChannel(MemoryChannel(), Sealer(new_secret())).backoff() == Backoff()
