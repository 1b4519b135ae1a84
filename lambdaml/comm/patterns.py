"""Collective patterns over a channel, written once for every channel and every encoding.

The channel is the only thing that differs between S3, Redis, Memcached and DynamoDB, and
the codec the only thing that differs between a plain and a compressed collective: a
pattern decides the requests, its ``ChunkCodec`` what travels in them. Both patterns add
the W contributions in rank order 0..W-1, element by element, so with the plain codec
they return bit-identical sums: to each other and to the left fold ``x0 + x1 + ... + x_{W-1}``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import numpy as np

from lambdaml import codec
from lambdaml.arrays import Array
from lambdaml.buffers import Placed, Target, Value
from lambdaml.channels.base import Piece
from lambdaml.comm.rounds import Round
from lambdaml.errors import CodecError


def chunk_bounds(size: int, parts: int) -> list[tuple[int, int]]:
    """``np.array_split``'s boundaries: the first ``size % parts`` chunks hold one extra element.

    With ``size < parts`` the last chunks are empty; they still travel (as 32-byte values)
    so that every rank issues the same 3W-2 requests whatever the vector's length.
    """
    base, extra = divmod(size, parts)
    bounds: list[tuple[int, int]] = []
    start = 0
    for j in range(parts):
        stop = start + base + (1 if j < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def rank_order_sum(values: Iterable[Array], into: Array | None = None) -> Array:
    """The left fold ``v0 + v1 + ...`` of at least two arrays, as a new array or in ``into`` (the
    inputs are untouched)."""
    it = iter(values)
    total = np.add(next(it), next(it), out=into)  # one pass instead of copy-then-add
    for value in it:
        total += value
    return total


def owner_sum(
    codec: ChunkCodec,
    chunk: int,
    own: Array,
    like: Array,
    senders: Iterable[int],
    raw: Mapping[int, bytes | memoryview],
    what: str,
    into: Array | None = None,
) -> Array:
    """The owner's sum of ``chunk``: its own piece where the sender is the owner itself, every
    other sender's decoded piece elsewhere, added in the senders' order (in ``into`` if given).
    ``what`` names a piece in errors (\"rank R's <what>\")."""
    return rank_order_sum(
        (
            own if sender == chunk else codec.decode_piece(chunk, sender, raw[sender], like, f"rank {sender}'s {what}")
            for sender in senders
        ),
        into,
    )


def packed_pieces(
    round_: Round, tag: str, peers: Sequence[int], lengths: Mapping[int, int | None], keys: Mapping[int, str]
) -> list[Piece]:
    """Where my piece lies in each sender's packed value (``keys``: my piece's key, by sender).

    Every one of ``peers`` packs its pieces for the others in ``peers`` order, at
    ``round_.key(tag, rank=sender)``, so mine is slot my position less one in the values of the
    peers before me. ``lengths``: the wire length of the piece each peer receives (the same from
    every sender), or None where the encoding does not fix it; a sender's slot lengths are
    given only where all are known, else its index is read first.
    """
    position = peers.index(round_.rank)

    def slot_lengths(sender: int) -> tuple[int, ...] | None:
        known = [lengths[peer] for peer in peers if peer != sender]
        return None if any(n is None for n in known) else tuple(n for n in known if n is not None)

    return [
        Piece(round_.key(tag, rank=sender), key, position - (peers.index(sender) < position), len(peers) - 1,
              slot_lengths(sender))
        for sender, key in keys.items()
    ]  # fmt: skip


class ChunkCodec(Protocol):
    """How one collective call's values go on the wire: the hook compression plugs into.

    A chunk is a part of the vector that one rank owns (W chunks in ScatterReduce, one in
    AllReduce). Every rank sends its *piece* of each chunk it does not own to the owner;
    the owner sums the pieces in rank order and sends the *merged* chunk back. ``like`` is
    this rank's own piece of the chunk: the dtype and shape a decoded value must have.
    Decoded values are only read (they may share memory with the raw bytes).
    """

    def encode_piece(self, chunk: int, values: Array) -> Value:
        """The wire value of my piece of ``chunk``, for its owner (it may view ``values``' memory)."""

    def piece_bytes(self, chunk: int, like: Array) -> int | None:
        """The length of every rank's wire value of its piece of ``chunk`` (``like``: mine), where the
        encoding fixes it; None where it varies. Known lengths spare a packed value's index read."""

    def own_piece(self, chunk: int, values: Array) -> Array:
        """My piece of the chunk I own, as the sum counts it (what its wire value would decode to)."""

    def decode_piece(self, chunk: int, sender: int, raw: bytes | memoryview, like: Array, what: str) -> Array:
        """``sender``'s piece of the chunk I own."""

    def encode_merged(self, chunk: int, total: Array) -> tuple[Value, Array]:
        """The wire value of the merged chunk I own, and the values every rank reads from it."""

    def decode_merged(self, chunk: int, raw: bytes | memoryview, like: Array, what: str) -> Array:
        """A merged chunk another rank owns."""


class PlainCodec:
    """Values travel as they are, as codec tensors: the collective of an uncompressed job."""

    def encode_piece(self, chunk: int, values: Array) -> Value:
        return codec.encode_buffers(values)

    def piece_bytes(self, chunk: int, like: Array) -> int | None:
        return codec.encoded_bytes(like.shape, like.dtype)

    def own_piece(self, chunk: int, values: Array) -> Array:
        return values

    def decode_piece(self, chunk: int, sender: int, raw: bytes | memoryview, like: Array, what: str) -> Array:
        return codec.decode(raw, dtype=like.dtype, shape=like.shape, what=what)

    def encode_merged(self, chunk: int, total: Array) -> tuple[Value, Array]:
        return codec.encode_buffers(total), total

    def decode_merged(self, chunk: int, raw: bytes | memoryview, like: Array, what: str) -> Array:
        return codec.decode(raw, dtype=like.dtype, shape=like.shape, what=what)

    def target(self, out: Array) -> Target:
        """Where a merged chunk's wire value is read for its values to land in ``out`` as they are:
        the header apart, the payload straight into ``out``'s memory."""
        return codec.encoded_bytes(out.shape, out.dtype) - out.nbytes, out.data.cast("B")

    def check_placed(self, head: bytes | memoryview, out: Array, what: str) -> None:
        """Verify a merged chunk read into its ``target``: ``head`` is its header."""
        codec.check_placed(head, out, what)


PLAIN = PlainCodec()


def receive_merged(
    round_: Round, codec: ChunkCodec, keys: Mapping[int, str], out: Callable[[int], Array], what: Callable[[int], str]
) -> None:
    """The merged chunks at ``keys`` (by chunk), each into its place ``out(chunk)`` (a contiguous view).

    Plain values are read straight into their place, their header apart, where the channel can
    (Memcached's chunked values), and copied in once read elsewhere; then checked where they
    lie. Any other codec's are decoded, then copied in.
    """
    if isinstance(codec, PlainCodec):
        got = round_.wait_for_into({key: codec.target(out(chunk)) for chunk, key in keys.items()})
        for chunk, key in keys.items():
            value = got[key]
            if isinstance(value, Placed):
                codec.check_placed(value.head, out(chunk), what(chunk))
            else:  # not of the chunk's length: decoding says what it is instead
                codec.decode_merged(chunk, value, out(chunk), what(chunk))
                raise CodecError(f"{what(chunk)} is not the length its place holds")
        return
    raw = round_.wait_for(list(keys.values()))
    for chunk, key in keys.items():
        out(chunk)[...] = codec.decode_merged(chunk, raw[key], out(chunk), what(chunk))


def send_pieces(
    round_: Round, codec: ChunkCodec, tag: str, peers: Sequence[int], values: Callable[[int], Array]
) -> None:
    """My piece for every other one of ``peers`` (``values(peer)``, encoded as that peer's chunk),
    all at once: one packed value where the round packs, else a value each."""
    me = round_.rank
    sent = [(round_.key(tag, rank=me, chunk=p), codec.encode_piece(p, values(p))) for p in peers if p != me]
    if round_.packs:
        round_.put_packed(round_.key(tag, rank=me), sent)
    else:
        round_.put_many(sent)


def receive_pieces(
    round_: Round, codec: ChunkCodec, tag: str, peers: Sequence[int], values: Callable[[int], Array]
) -> dict[int, memoryview]:
    """Every other peer's piece for me (its ``send_pieces``), by peer, once all are there.

    ``values`` is the senders' own: where the round packs, the pieces' lengths find mine in
    each packed value (``packed_pieces``)."""
    me = round_.rank
    keys = {p: round_.key(tag, rank=p, chunk=me) for p in peers if p != me}
    if round_.packs:
        lengths = {p: codec.piece_bytes(p, values(p)) for p in peers}
        got = round_.wait_for_packed(packed_pieces(round_, tag, peers, lengths, keys))
    else:
        size = codec.piece_bytes(me, values(me))  # every sender's piece of my chunk is as long as mine
        got = round_.wait_for(list(keys.values()), None if size is None else dict.fromkeys(keys.values(), size))
    return {p: got[key] for p, key in keys.items()}


class Pattern(ABC):
    """A strategy for allreduce over a channel (registered by name in ``lambdaml.comm.PATTERNS``)."""

    @abstractmethod
    def chunks(self, world: int) -> int:
        """How many chunks it cuts a vector into, chunk j owned by rank j (a compressor keeps memory per chunk)."""

    @abstractmethod
    def allreduce(self, round_: Round, x: Array, codec: ChunkCodec) -> Array:
        """The sum of ``x`` over the round's W > 1 ranks, identical on every rank and owned by the caller."""


class AllReduce(Pattern):
    """One aggregator (rank 0): W-1 puts in, one merged put out, W-1 gets of it.

    The aggregator keeps its own vector in memory and fetches the others concurrently;
    contributions are summed in rank order so every run reduces identically. Simple, but
    the aggregator moves W times the vector, so it is the bottleneck for large W and d.
    The whole vector is the one chunk, rank 0's.
    """

    tag = "ar"

    def chunks(self, world: int) -> int:
        return 1

    def allreduce(self, round_: Round, x: Array, codec: ChunkCodec) -> Array:
        merged_key = round_.key(self.tag, rank=None)
        if round_.rank != 0:
            round_.put(round_.key(self.tag, rank=round_.rank), codec.encode_piece(0, x))
            out = np.empty(x.shape, x.dtype)
            receive_merged(
                round_, codec, {0: merged_key}, lambda _: out, lambda _: f"merged value of round {round_.number}"
            )
            # Rank 0 merged this round, so every rank had posted it: none reads the previous round again.
            round_.retire()
            return out
        own = codec.own_piece(0, x)
        part_keys = [round_.key(self.tag, rank=r) for r in range(1, round_.world_size)]
        size = codec.piece_bytes(0, x)  # every rank's value is as long as mine
        parts = round_.wait_for(part_keys, None if size is None else dict.fromkeys(part_keys, size))
        values = (
            codec.decode_piece(0, r, parts[key], x, f"rank {r}'s value of round {round_.number}")
            for r, key in enumerate(part_keys, start=1)
        )
        data, total = codec.encode_merged(0, rank_order_sum([own, *values]))
        round_.put(merged_key, data)
        # Every rank has posted this round, so all have read the previous round's merged value.
        round_.retire()
        return total


class ScatterReduce(Pattern):
    """Every rank owns 1/W of the vector: W-1 concurrent puts, W-1 gets, 1 put, W-1 gets.

    Rank i splits x into W contiguous chunks, puts chunk j for its owner j, sums the W
    pieces of its own chunk (its own piece from memory) and puts the merged chunk; then
    everyone gathers the W-1 merged chunks it does not own. That is 3W-2 requests of about
    d/W elements per rank per round, so no rank moves more than about 3 vectors, where
    AllReduce's aggregator moves W+1.

    Where the channel reads ranges natively (S3, whose PUTs cost 12.5 GETs), rank i puts its
    W-1 pieces as one packed value and each owner ranged-reads its piece of it: 2 puts and
    2(W-1) gets per rank per round (3(W-1) with a codec of varying lengths, whose owners read
    each packed value's index first). The bytes, and so the sum, are the same.
    """

    tag = "sr"

    def chunks(self, world: int) -> int:
        return world

    def allreduce(self, round_: Round, x: Array, codec: ChunkCodec) -> Array:
        world, rank, number = round_.world_size, round_.rank, round_.number
        flat = np.ascontiguousarray(x).reshape(-1)
        bounds = chunk_bounds(flat.size, world)

        def piece(j: int) -> Array:
            return flat[bounds[j][0] : bounds[j][1]]

        # 1. Scatter: my piece of every chunk I do not own goes to its owner, all at once.
        send_pieces(round_, codec, self.tag, range(world), piece)

        # 2. Reduce my chunk: the W-1 other pieces, added in rank order around my own.
        lo, hi = bounds[rank]
        mine = flat[lo:hi]
        own = codec.own_piece(rank, mine)  # before the pieces' lengths: a compressing codec counts its own here
        raw = receive_pieces(round_, codec, self.tag, range(world), piece)
        # Safe: rank r writes its pieces of this round only after its call for the previous
        # round returned, i.e. after it wrote every key it writes there (pieces, merged chunk)
        # and read every value it reads there (its chunk's pieces, all merged chunks).
        # Holding this round's piece from every other rank, and being past the previous round
        # itself, this rank knows nobody touches that round again, and deletes what it wrote
        # there: the channel keeps the last two rounds (three while a delete runs).
        round_.retire()
        what = f"piece of chunk {rank} in round {number}"
        out = np.empty_like(flat)
        summed = owner_sum(codec, rank, own, mine, range(world), raw, what, into=out[lo:hi])
        data, total = codec.encode_merged(rank, summed)
        round_.put(round_.key(self.tag, rank=None, chunk=rank), data)
        if total is not summed:  # a lossy codec's merged values are what every rank reads
            out[lo:hi] = total

        # 3. Gather the merged chunks the other ranks own, each straight into its place.
        merged_keys = {j: round_.key(self.tag, rank=None, chunk=j) for j in range(world) if j != rank}
        receive_merged(
            round_,
            codec,
            merged_keys,
            lambda j: out[bounds[j][0] : bounds[j][1]],
            lambda j: f"merged chunk {j} of round {number}",
        )
        return out.reshape(x.shape)
