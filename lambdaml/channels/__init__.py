"""Storage channels: the substrate workers synchronize through."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lambdaml import catalogue
from lambdaml.channels.base import Backoff, Channel, ChannelStats
from lambdaml.registry import Registry

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

CHANNELS: Registry[type[Channel]] = Registry.of("channel", catalogue.CHANNELS)


def open_channel(spec: ChannelSpec) -> Channel:
    """Build the channel a spec describes, with its client.

    A server that stops answering mid-job is given as long to come back as a first
    connection is given to succeed (``connect_timeout_s``), e.g. a Redis restart.
    """
    channel = CHANNELS.get(spec.kind).from_spec(spec)
    channel.reconnect_s = spec.connect_timeout_s
    return channel


__all__ = ["CHANNELS", "Backoff", "Channel", "ChannelStats", "open_channel"]
