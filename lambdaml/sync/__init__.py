"""Synchronization protocols: BSP through the communicator's collectives, ASP and SSP through
an append-only log of updates on the channel, and the ring's neighbour exchange."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lambdaml.comm.base import Communicator
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.sync.asp import AsyncProtocol
from lambdaml.sync.base import SyncProtocol
from lambdaml.sync.bsp import BSP, compressed_allreduce
from lambdaml.sync.ring import RingProtocol

if TYPE_CHECKING:
    from lambdaml.config import AlgorithmSpec, SyncSpec


def open_protocol(
    spec: AlgorithmSpec, comm: Communicator, sync: SyncSpec | None, *, decentralized: bool
) -> SyncProtocol:
    """One worker's protocol: the ring for a decentralized algorithm, else what ``sync`` asks (BSP when None)."""
    if decentralized:
        return RingProtocol(comm)
    if sync is not None and sync.protocol != "bsp":
        if not isinstance(comm, ChannelCommunicator):
            raise TypeError("ASP and SSP run over a channel communicator")
        return AsyncProtocol(comm, staleness=sync.staleness if sync.protocol == "ssp" else None)
    return BSP(comm, compressed_allreduce(spec, comm))


__all__ = ["BSP", "AsyncProtocol", "RingProtocol", "SyncProtocol", "open_protocol"]
