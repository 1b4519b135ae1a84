"""One contract every channel passes unchanged: the only thing a backend supplies is the fixture.

Runs against real services (moto for S3 and DynamoDB, redis-server, memcached) started by
tests/conftest.py. Each test works under its own key prefix.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from lambdaml import codec
from lambdaml import keys as K
from lambdaml.buffers import Placed, joined
from lambdaml.channels import Channel
from lambdaml.channels.base import Piece
from lambdaml.channels.chunks import split_value
from lambdaml.channels.memcached import MemcachedChannel
from lambdaml.channels.sealed import SealedChannel
from lambdaml.errors import ChannelError, KeyNotFound, SyncTimeout
from lambdaml.seal import Sealer, new_secret

pytestmark = pytest.mark.timeout(120)


def _put_all(channel: Channel, items: dict[str, bytes], workers: int = 32) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda kv: channel.put(*kv), items.items()))


def test_put_get_and_overwrite(channel: Channel, prefix: str) -> None:
    key = prefix + "value"
    channel.put(key, b"first")
    assert channel.get(key) == b"first"
    channel.put(key, b"second, longer")
    assert channel.get(key) == b"second, longer"
    every_byte = bytes(range(256)) * 4
    channel.put(prefix + "binary", every_byte)
    assert channel.get(prefix + "binary") == every_byte
    channel.put(prefix + "empty", b"")
    assert channel.get(prefix + "empty") == b""
    assert channel.list(prefix) == [prefix + "binary", prefix + "empty", key]


def test_missing_key_raises_key_not_found(channel: Channel, prefix: str) -> None:
    key = prefix + "never-written"
    with pytest.raises(KeyNotFound) as info:
        channel.get(key)
    assert key in str(info.value)
    assert isinstance(info.value, ChannelError)


def test_list_many_keys_sorted_across_pages(channel: Channel, prefix: str) -> None:
    wanted = {f"{prefix}many/{i:05d}": str(i).encode() for i in range(2000)}
    others = {f"{prefix}many-not/{i}": b"x" for i in range(3)} | {f"{prefix}other/{i}": b"y" for i in range(3)}
    _put_all(channel, wanted | others)
    listed = channel.list(prefix + "many/")
    assert len(listed) == 2000  # S3 lists 1,000 per page: this needs the paginator
    assert listed == sorted(wanted)
    assert channel.list(prefix + "other/") == sorted(k for k in others if "/other/" in k)
    assert len(channel.list(prefix)) == 2006


def test_delete_single_many_and_missing(channel: Channel, prefix: str) -> None:
    items = {f"{prefix}d/{i:03d}": b"v%d" % i for i in range(60)}
    _put_all(channel, items)
    keys = sorted(items)

    channel.delete([keys[0]])
    with pytest.raises(KeyNotFound):
        channel.get(keys[0])
    assert channel.get(keys[1]) == items[keys[1]]

    channel.delete([*keys[1:50], prefix + "d/missing", prefix + "never/there"])
    for key in keys[:50]:
        with pytest.raises(KeyNotFound):
            channel.get(key)
    assert channel.list(prefix + "d/") == keys[50:]
    channel.delete([])  # nothing to do is not an error
    channel.delete([prefix + "d/missing"])
    assert channel.list(prefix + "d/") == keys[50:]


def test_large_value_round_trips_and_parts_are_cleaned(channel: Channel, prefix: str) -> None:
    key = prefix + "big/value"
    data = os.urandom(10 * 1024 * 1024)
    channel.put(key, data)
    assert channel.get(key) == data
    assert channel.get_many([key, prefix + "big/missing"]) == {key: data}
    assert channel.list(prefix) == [key]  # chunk parts never show in a listing
    raw = sorted(channel._list(prefix))
    if channel.max_item_bytes is not None:
        assert len(raw) == math.ceil(len(data) / channel.max_item_bytes) + 1  # the parts and the manifest
    else:
        assert raw == [key]

    channel.delete([key])
    with pytest.raises(KeyNotFound):
        channel.get(key)
    assert list(channel._list(prefix)) == []  # parts went with the key

    channel.put(key, data[: 3 * 1024 * 1024 + 7])
    assert channel.get(key) == data[: 3 * 1024 * 1024 + 7]
    assert channel.clear(prefix) >= 1
    assert list(channel._list(prefix)) == []


def test_a_value_at_the_item_limit_under_a_long_key_is_one_item(channel: Channel, prefix: str) -> None:
    # The limit leaves room for the store's own item overhead: a value of exactly the limit is stored whole.
    if channel.max_item_bytes is None:
        pytest.skip("values are never chunked here")
    key = prefix + "k" * (230 - len(prefix))  # memcached keys (a part's too) hold at most 250 bytes
    data = os.urandom(channel.max_item_bytes)
    channel.put(key, data)
    assert list(channel._list(prefix)) == [key]
    assert channel.get(key) == data
    channel.put(key, data + b"!")  # one byte more is chunked, and its parts fit as well
    assert len(list(channel._list(prefix))) == 3
    assert channel.get(key) == data + b"!"


def test_wait_for_returns_values_written_later(channel: Channel, prefix: str) -> None:
    keys = [f"{prefix}w/{i}" for i in range(3)]

    def write_later() -> None:
        time.sleep(0.3)
        for i, key in enumerate(keys):
            channel.put(key, b"late-%d" % i)

    writer = threading.Thread(target=write_later)
    started = time.monotonic()
    writer.start()
    try:
        values = channel.wait_for(keys, timeout=10.0)
    finally:
        writer.join()
    elapsed = time.monotonic() - started
    assert values == {key: b"late-%d" % i for i, key in enumerate(keys)}
    assert 0.25 <= elapsed < 5.0


def test_wait_for_times_out_when_a_key_never_appears(channel: Channel, prefix: str) -> None:
    channel.put(prefix + "w/present", b"here")
    started = time.monotonic()
    with pytest.raises(SyncTimeout) as info:
        channel.wait_for([prefix + "w/present", prefix + "w/absent"], timeout=0.6)
    elapsed = time.monotonic() - started
    assert 0.6 <= elapsed < 3.0
    assert "w/absent" in str(info.value)


def test_wait_for_into_reads_each_value_past_its_head_into_its_body(channel: Channel, prefix: str) -> None:
    big = 2 * (channel.max_item_bytes or 1 << 20) + 5  # chunked where the channel chunks
    values = {prefix + "into/small": os.urandom(100), prefix + "into/big": os.urandom(big)}
    channel.put_many(list(values.items()))
    bodies = {key: memoryview(bytearray(len(data) - 16)) for key, data in values.items()}
    got = channel.wait_for_into({key: (16, body) for key, body in bodies.items()}, timeout=10.0)
    for key, data in values.items():
        placed = got[key]
        assert isinstance(placed, Placed)
        assert bytes(placed.head) == data[:16] and bytes(bodies[key]) == data[16:]

    # A value of another length than its target's comes back as it is, its body untouched.
    short = memoryview(bytearray(b"\xab" * (big - 17)))
    got = channel.wait_for_into({prefix + "into/big": (16, short)}, timeout=10.0)
    assert bytes(got[prefix + "into/big"]) == values[prefix + "into/big"]
    assert bytes(short) == b"\xab" * (big - 17)
    with pytest.raises(SyncTimeout, match="into/absent"):
        channel.wait_for_into({prefix + "into/absent": (0, memoryview(bytearray(1)))}, timeout=0.3)


def _read_into_place(channel: Channel, key: str, data: bytes) -> memoryview:
    """``data`` at ``key``, waited for into a target of an 8-byte head and a body of the rest: checked
    to come back placed, its body holding the rest; the body."""
    body = memoryview(bytearray(len(data) - 8))
    assert channel.wait_for_into({key: (8, body)}, timeout=10.0) == {key: Placed(data[:8])}
    assert bytes(body) == data[8:]
    return body


def test_a_chunked_value_read_into_place_is_never_joined_first(
    channel: Channel, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if channel.kind != "memcached":
        pytest.skip("only Memcached reads a chunked value's parts into buffers of its choosing")
    key, data = prefix + "into/parts", os.urandom(3 * channel.max_item_bytes)
    channel.put(key, data)
    monkeypatch.setattr(channel, "_join_chunked", lambda manifests: pytest.fail("joined before placing"))
    body = _read_into_place(channel, key, data)
    # A part of another write is refused here as in any other read of the value.
    stale = channel._get(K.chunk_part(key, 1))
    channel.put(key, os.urandom(len(data)))
    channel._put(K.chunk_part(key, 1), stale)
    with pytest.raises(ChannelError, match="reassembled wrong"):
        channel.wait_for_into({key: (8, body)}, timeout=10.0)


def _record_gets(
    channel: Channel, monkeypatch: pytest.MonkeyPatch, after_first: Callable[[], None] | None = None
) -> list[list[str]]:
    """The keys of each ``get`` Memcached's reads into buffers send, in order, from now on;
    ``after_first`` runs once the first has been answered."""
    gets: list[list[str]] = []
    get_into = channel._get_into

    def recorded(pool: Any, keys: list[str], place: Any) -> list[str]:
        gets.append(list(keys))
        found: list[str] = get_into(pool, keys, place)
        if after_first is not None and len(gets) == 1:
            after_first()
        return found

    monkeypatch.setattr(channel, "_get_into", recorded)
    return gets


def test_a_chunked_value_is_one_write_request_and_read_into_place_in_one_get(
    channel: Channel, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not channel.ordered_writes:
        pytest.skip("only Memcached keeps a write request's order")
    assert channel.max_item_bytes is not None
    key, data = prefix + "ordered/value", os.urandom(2 * channel.max_item_bytes + 100)
    parts = [K.chunk_part(key, n) for n in range(3)]
    writes: list[list[str]] = []
    write = channel._write
    monkeypatch.setattr(channel, "_write", lambda batch: (writes.append([k for k, _ in batch]), write(batch))[1])
    assert sorted(channel.put(key, data)) == sorted([*parts, key])
    assert writes == [[*parts, key]]  # the manifest last, in its parts' request
    gets = _record_gets(channel, monkeypatch)
    _read_into_place(channel, key, data)
    assert gets == [[key, *parts]]  # no read of the manifest first


def test_a_chunked_value_of_known_length_is_waited_for_in_one_get(
    channel: Channel, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not channel.ordered_writes:
        pytest.skip("only Memcached reads a chunked value and its manifest in one get")
    assert channel.max_item_bytes is not None
    key, data = prefix + "sized/value", os.urandom(2 * channel.max_item_bytes + 100)
    sealed = SealedChannel(channel, Sealer(new_secret()))  # as the communicator reads: each length + the seal's
    sealed.put(key, data)
    gets = _record_gets(channel, monkeypatch)
    found = sealed.wait_for_views([key], timeout=10.0, lengths={key: len(data)})
    assert {k: bytes(v) for k, v in found.items()} == {key: data}
    assert gets == [[key, *(K.chunk_part(key, n) for n in range(3))]]  # no read of the manifest first
    # A length the reader has wrong changes nothing but the requests: the value as it is.
    assert sealed.wait_for([key], timeout=10.0, lengths={key: len(data) - 1}) == {key: data}


def test_parts_found_before_their_manifest_are_read_once_and_a_part_gone_is_an_error(
    channel: Channel, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not channel.ordered_writes:
        pytest.skip("only Memcached reads a chunked value and its manifest in one get")
    assert channel.max_item_bytes is not None
    key, data = prefix + "ordered/in-progress", os.urandom(2 * channel.max_item_bytes)
    parts, manifest = split_value(key, data, channel.max_item_bytes)
    for part, value in parts:  # a write in progress: its parts stored, its manifest not yet
        channel._put(part, joined(value))
    gets = _record_gets(channel, monkeypatch, after_first=lambda: channel._put(*manifest))  # completed between polls
    body = _read_into_place(channel, key, data)
    assert gets == [[key, *(part for part, _ in parts)], [key]]  # the parts were read once, before the manifest
    monkeypatch.undo()
    channel._delete([parts[1][0]])  # evicted, say
    with pytest.raises(ChannelError, match="missing 1 of 3 parts"):
        channel.wait_for_into({key: (8, body)}, timeout=10.0)


def test_a_value_chunked_at_another_item_limit_is_still_read_into_place(channel: Channel, prefix: str) -> None:
    if not isinstance(channel, MemcachedChannel):
        pytest.skip("only Memcached reads a chunked value's parts where it expects them")
    assert channel.max_item_bytes is not None
    writer = MemcachedChannel(channel.client, channel.server, channel.max_item_bytes - 1000)
    key, data = prefix + "ordered/other-limit", os.urandom(2 * channel.max_item_bytes)
    writer.put(key, data)  # three parts, as the reader would cut it, but cut elsewhere
    _read_into_place(channel, key, data)


def test_concurrent_writers(channel: Channel, prefix: str) -> None:
    def writer(rank: int) -> None:
        for i in range(50):
            channel.put(f"{prefix}cw/{rank}/{i:02d}", f"{rank}:{i}".encode() * 20)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(writer, range(8)))
    expected = {f"{prefix}cw/{r}/{i:02d}": f"{r}:{i}".encode() * 20 for r in range(8) for i in range(50)}
    assert channel.get_many(sorted(expected)) == expected
    assert channel.list(prefix + "cw/") == sorted(expected)


def test_get_many_returns_only_found_keys(channel: Channel, prefix: str) -> None:
    present = {f"{prefix}gm/{i}": b"%d" % i for i in range(3)}
    _put_all(channel, present)
    asked = [*present, prefix + "gm/x", prefix + "gm/y", next(iter(present))]
    assert channel.get_many(asked) == present
    assert channel.get_many([prefix + "gm/none"]) == {}
    assert channel.get_many([]) == {}


def test_clear_removes_exactly_the_prefix(channel: Channel, prefix: str) -> None:
    a = {f"{prefix}a/{i}": b"a" for i in range(5)}
    ab = {f"{prefix}ab/{i}": b"ab" for i in range(4)}
    b = {f"{prefix}b/{i}": b"b" for i in range(3)}
    _put_all(channel, a | ab | b)
    assert channel.clear(prefix + "a/") == 5
    assert channel.list(prefix + "a/") == []
    assert channel.list(prefix) == sorted(ab | b)
    assert channel.get(f"{prefix}ab/0") == b"ab"
    assert channel.clear(prefix + "nothing/") == 0


def test_prefix_with_glob_characters_matches_literally(channel: Channel, prefix: str) -> None:
    names = ["a*b", "a?b", "a[b]", "axb", "a\\b"]
    _put_all(channel, {f"{prefix}g/{n}": n.encode() for n in names})
    assert channel.list(prefix + "g/a*") == [prefix + "g/a*b"]
    assert channel.list(prefix + "g/a?") == [prefix + "g/a?b"]
    assert channel.list(prefix + "g/a[") == [prefix + "g/a[b]"]
    assert channel.list(prefix + "g/a\\") == [prefix + "g/a\\b"]
    assert len(channel.list(prefix + "g/a")) == len(names)


def test_a_part_of_another_write_of_the_key_is_never_reassembled(channel: Channel, prefix: str) -> None:
    if channel.max_item_bytes is None:
        pytest.skip("values are never chunked here")
    key = prefix + "mixed/value"
    first, second = os.urandom(2 * channel.max_item_bytes + 5), os.urandom(2 * channel.max_item_bytes + 5)
    channel.put(key, first)
    stale_part = channel._get(K.chunk_part(key, 1))
    channel.put(key, second)
    assert channel.get(key) == second
    channel._put(K.chunk_part(key, 1), stale_part)  # same length, the other write's bytes
    with pytest.raises(ChannelError, match="reassembled wrong"):
        channel.get(key)


def test_chunked_values_read_together_fetch_their_parts_in_one_call(
    channel: Channel, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if channel.max_item_bytes is None:
        pytest.skip("values are never chunked here")
    values = {f"{prefix}cv/{i}": os.urandom(2 * channel.max_item_bytes + i) for i in range(3)}
    channel.put_many(list(values.items()))
    calls: list[int] = []
    fetch, join = channel._get_many, channel._join_chunked
    monkeypatch.setattr(channel, "_get_many", lambda keys: calls.append(len(keys)) or fetch(keys))
    monkeypatch.setattr(channel, "_join_chunked", lambda manifests: calls.append(-len(manifests)) or join(manifests))
    assert channel.get_many([*values, prefix + "cv/missing"]) == values
    # The keys, then the parts of all 3 values in one call (all at once, or each value's parts
    # read into one buffer concurrently), not one call a value.
    assert calls in ([4, -3, 9], [4, -3])


def test_put_many_writes_small_and_chunked_values_in_batches(channel: Channel, prefix: str) -> None:
    # More small values than one batch carries, and values each over the item limit in between.
    small = {f"{prefix}pm/s{i:03d}": os.urandom(40 + i % 7) for i in range(250)}
    large = {f"{prefix}pm/l{i}": os.urandom(1_200_000 + i) for i in range(3)}
    items = list(small.items())
    items[10:10] = large.items()
    before = channel.stats.as_dict()
    channel.put_many(items)
    after = channel.stats.as_dict()
    assert channel.get_many([*small, *large]) == small | large
    limit = channel.max_item_bytes
    parts = sum(math.ceil(len(v) / limit) + 1 for v in large.values()) if limit else len(large)
    assert after["puts"] - before["puts"] == len(small) + parts
    assert after["bytes_sent"] - before["bytes_sent"] >= sum(map(len, small.values())) + sum(map(len, large.values()))
    assert channel.list(prefix + "pm/") == sorted([*small, *large])


def test_stats_count_requests_and_bytes(channel: Channel, prefix: str) -> None:
    before = channel.stats.as_dict()
    payload = os.urandom(5000)
    channel.put(prefix + "s", payload)
    assert channel.get(prefix + "s") == payload
    after = channel.stats.as_dict()
    assert after["bytes_sent"] - before["bytes_sent"] >= len(payload)
    assert after["bytes_received"] - before["bytes_received"] >= len(payload)
    assert after["puts"] - before["puts"] >= 1
    assert after["gets"] - before["gets"] >= 1
    assert after["requests"] > before["requests"]


def test_get_range_native_and_default_read_the_same_bytes(
    channel: Channel, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, large_key = prefix + "ranged", prefix + "ranged-large"
    value, large = os.urandom(3000), os.urandom(1_200_000)  # the large one is chunked where items are small
    channel.put_many([(key, value), (large_key, large)])
    ranges = [(key, 0, 1), (key, 100, 3000), (key, 2990, 3000), (large_key, 1_000_000, 1_100_000)]
    missing = (prefix + "never-written", 0, 5)

    def read() -> tuple[dict[tuple[str, int, int], bytes], int]:
        before = channel.stats.gets
        found = channel.get_ranges([*ranges, missing])
        return found, channel.stats.gets - before

    native, native_gets = read()
    assert native == {(k, a, b): (large if k == large_key else value)[a:b] for k, a, b in ranges}
    assert channel.get_range(key, 7, 9) == value[7:9]
    if channel.native_ranges:  # one request a range, for just its bytes
        assert native_gets == len(ranges) + 1
    native_kind = channel.ranged_reads
    monkeypatch.setattr(channel, "ranged_reads", False)
    default, _ = read()
    assert default == native
    for ranged in (native_kind, False):  # past the end, natively or not, is one clear error
        monkeypatch.setattr(channel, "ranged_reads", ranged)
        for start, stop in ((2990, 3001), (3000, 3010)):
            with pytest.raises(ChannelError, match="past the end"):
                channel.get_range(key, start, stop)
        with pytest.raises(KeyNotFound):
            channel.get_range(*missing)
        with pytest.raises(ValueError, match="start < stop"):
            channel.get_range(key, 5, 5)


def test_packed_values_are_read_piece_by_piece(channel: Channel, prefix: str) -> None:
    key = prefix + "packed"
    pieces = [(f"{prefix}piece/{i}", os.urandom(n)) for i, n in enumerate((5, 0, 64, 1001))]
    before = channel.stats.puts
    stored = channel.put_packed(key, pieces)
    assert channel.stats.puts - before == 1 and stored == [key]
    lengths = tuple(len(data) for _, data in pieces)
    for known in (lengths, None):  # with the lengths: no index read
        wanted = [Piece(key, name, i, len(pieces), known) for i, (name, _) in enumerate(pieces)]
        assert channel.wait_for_packed(wanted, timeout=5) == dict(pieces)
    # The index holds itself, then every piece 8-byte aligned after it.
    head = channel.get_range(key, 0, codec.packed_index_bytes(len(pieces)))
    assert codec.decode_packed_index(head, len(pieces)) == codec.packed_slots(lengths)
    with pytest.raises(SyncTimeout):
        channel.wait_for_packed([Piece(prefix + "absent", "x", 0, 1)], timeout=0.05)
