"""A direct job's links refuse what a store refuses: a frame replayed from another round or sent
under another rank's key, or sealed without the job's secret, never reaches a sum; its link is
dropped and the pair goes on through the store. A peer that stops sending ends the round at the
job's timeout with one clear error, never a hang."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from lambdaml import keys, seal
from lambdaml.channels import open_channel
from lambdaml.comm.direct.communicator import DirectCommunicator
from lambdaml.comm.direct.links import Links
from lambdaml.config import ChannelSpec
from lambdaml.errors import SyncTimeout
from lambdaml.seal import Sealer
from tests.helpers import Services, channel_spec, unique_name

pytestmark = pytest.mark.timeout(120)

JOB = "linksec"
SECRET = seal.new_secret()


@pytest.fixture
def receiver(services: Services) -> Iterator[DirectCommunicator]:
    """Rank 0 of a W = 3 direct job, in round 5."""
    spec = ChannelSpec(kind="direct", rendezvous=channel_spec("redis", services).model_dump())
    comm = DirectCommunicator(open_channel(spec), JOB, 0, 3, spec=spec, secret=SECRET)
    comm.round = 6  # round 5 in progress
    yield comm
    comm.channel.close()


class Dropped:
    """Why rank 0 dropped its link, once it has (on the link's reader thread)."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.done = threading.Event()

    def __call__(self, peer: int, why: str) -> None:
        self.reasons.append(why)
        self.done.set()

    def why(self) -> list[str]:
        assert self.done.wait(30), "the link was not dropped"
        return self.reasons


def our_end(receiver: DirectCommunicator, sock: socket.socket, sealer: Sealer) -> tuple[Links, Dropped]:
    """Rank 0's link to rank 1 over ``sock``, admitting what ``receiver`` admits; what it dropped, and why."""
    dropped = Dropped()
    ours = Links(
        {1: sock}, sealer, admit=receiver._admit, on_drop=dropped, goodbye=lambda peer: keys.link_goodbye_key(JOB, peer)
    )
    return ours, dropped


def linked(receiver: DirectCommunicator, sender_secret: bytes = SECRET) -> tuple[Links, Links, Dropped]:
    """Rank 0's link to rank 1 (MAC'd frames), and rank 1's end of it (a socket pair)."""
    mine, theirs = socket.socketpair()
    ours, dropped = our_end(receiver, mine, Sealer(SECRET))
    sender = Links(
        {0: theirs}, Sealer(sender_secret), admit=lambda peer, key: None, on_drop=lambda peer, why: None,
        goodbye=lambda peer: keys.link_goodbye_key(JOB, peer),
    )  # fmt: skip
    return ours, sender, dropped


def piece(round_: int, rank: int) -> str:
    return keys.comm_key(JOB, round_, "dpiece", rank=rank, chunk=0)


def test_a_frame_of_this_round_from_its_sender_is_taken(receiver: DirectCommunicator) -> None:
    ours, sender, dropped = linked(receiver)
    try:
        assert sender.send(0, piece(5, 1), (b"value",))
        assert bytes(ours.receive(1, piece(5, 1), 30) or b"") == b"value"
        assert dropped.reasons == [] and ours.up(1)
    finally:
        ours.close()
        sender.close()


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (piece(3, 1), "round 3 is over"),
        (piece(5, 2), "a key of rank 2's"),
        (keys.comm_key("otherjob", 5, "dpiece", rank=1, chunk=0), "another job"),
        (keys.comm_key(JOB, 5, "dpiece", rank=1, chunk=0, attempt=2), "another job or attempt"),
    ],
    ids=["replayed-round", "other-rank", "other-job", "other-attempt"],
)
def test_a_replayed_or_misplaced_frame_is_refused_and_its_link_dropped(
    receiver: DirectCommunicator, key: str, why: str
) -> None:
    ours, sender, dropped = linked(receiver)
    try:
        assert sender.send(0, key, (b"replayed",))
        assert ours.receive(1, key, 30) is None, "a refused frame's value was delivered"
        assert len(dropped.why()) == 1 and why in dropped.reasons[0]
        assert ours.stats.frames_refused == 1 and not ours.up(1)
    finally:
        ours.close()
        sender.close()


def test_with_integrity_mac_a_frame_sealed_without_the_jobs_secret_is_refused(receiver: DirectCommunicator) -> None:
    ours, sender, dropped = linked(receiver, sender_secret=seal.new_secret())
    try:
        assert sender.send(0, piece(5, 1), (b"forged",))
        assert ours.receive(1, piece(5, 1), 30) is None
        assert len(dropped.why()) == 1 and "MAC" in dropped.reasons[0]
    finally:
        ours.close()
        sender.close()


def test_a_peer_that_stops_sending_ends_the_round_at_the_timeout_with_one_clear_error(services: Services) -> None:
    spec = ChannelSpec(kind="direct", rendezvous=channel_spec("redis", services).model_dump())
    job = unique_name("stall")
    release = threading.Event()
    errors: dict[int, BaseException] = {}
    comms = [DirectCommunicator(open_channel(spec), job, r, 2, spec=spec, secret=SECRET, timeout_s=3) for r in (0, 1)]

    def rank(r: int) -> None:
        try:
            comms[r].allreduce(np.ones(10, np.float32))
            if r == 1:
                release.wait(60)  # linked and alive, but sends nothing more
                return
            comms[r].allreduce(np.ones(10, np.float32))
        except BaseException as exc:
            errors[r] = exc
        finally:
            if r == 0:
                release.set()

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    try:
        assert not any(thread.is_alive() for thread in threads), "a rank hung"
        assert set(errors) == {0} and isinstance(errors[0], SyncTimeout)
        assert "from rank 1 over its link" in str(errors[0]) and "\n" not in str(errors[0])
    finally:
        for comm in comms:
            comm.close()
            comm.channel.close()


def test_under_integrity_auto_a_frame_moved_to_another_key_is_refused(receiver: DirectCommunicator) -> None:
    """Frames between peers that proved the secret are bound to their key: one sealed for round 5's
    piece and sent as another rank's is refused, as a value moved on a store is."""
    from lambdaml.comm.direct import links

    assert not receiver.spec.links_carry_mac
    mine, theirs = socket.socketpair()
    ours, dropped = our_end(receiver, mine, Sealer(None))
    try:
        claimed, sealed = piece(5, 1), Sealer(None).seal(piece(5, 2), b"moved")
        name = claimed.encode()
        theirs.sendall(links._FRAME.pack(links._MAGIC, len(name), len(sealed)) + name + sealed)
        assert ours.receive(1, claimed, 30) is None
        assert "another key" in dropped.why()[0]
    finally:
        ours.close()
        theirs.close()


def test_what_a_rank_keeps_for_a_dropped_links_hand_over_is_bounded(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    """Restarts keep ``extra_retention`` rounds of sent values, but never more than ``kept_bytes``
    beyond the last two: a large model's rounds would fill a function's memory."""
    spec = ChannelSpec(kind="direct", rendezvous=channel_spec("redis", services).model_dump())
    job = unique_name("kept")
    comms = [
        DirectCommunicator(open_channel(spec), job, r, 2, spec=spec, secret=SECRET, timeout_s=30, extra_retention=10)
        for r in (0, 1)
    ]
    comms[0].kept_bytes = 1  # rank 0 keeps the last two rounds only; rank 1 all ten

    def rank(r: int) -> None:
        for _ in range(6):
            comms[r].allreduce(np.ones(1000, np.float32))
        kept[r] = sorted(comms[r]._sent[1 - r])
        comms[r].finish()

    kept: dict[int, list[int]] = {}

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not any(thread.is_alive() for thread in threads)
        assert kept == {0: [4, 5], 1: [0, 1, 2, 3, 4, 5]}
        assert "rank 0 keeps its link values of the last 2 rounds only" in caplog.text
        assert "rank 1 keeps" not in caplog.text
    finally:
        for comm in comms:
            comm.channel.close()
