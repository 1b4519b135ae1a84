"""Storage channels: the substrate workers synchronize through.

The channel classes are imported on first use (``Channel``, ``Backoff``, ``ChannelStats`` too):
the catalogue reads the kinds' descriptions (``lambdaml.channels.kinds``) from this package, and
the cost model asks them without loading any channel, numpy or client library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lambdaml import catalogue
from lambdaml.registry import Registry

if TYPE_CHECKING:
    from lambdaml.channels.base import Backoff, Channel
    from lambdaml.channels.stats import ChannelStats
    from lambdaml.config import ChannelSpec

#: Where each name this package offers is defined.
_DEFINED_IN = {
    "Backoff": "lambdaml.channels.base",
    "Channel": "lambdaml.channels.base",
    "ChannelStats": "lambdaml.channels.stats",
}

CHANNELS: Registry[type[Channel]] = Registry.of("channel", catalogue.CHANNELS)


def open_channel(spec: ChannelSpec) -> Channel:
    """Build the channel a spec describes, with its client.

    A server that stops answering mid-job is given as long to come back as a first
    connection is given to succeed (``connect_timeout_s``), e.g. a Redis restart.
    """
    channel = CHANNELS.get(spec.kind).from_spec(spec)
    channel.reconnect_s = spec.connect_timeout_s
    return channel


def __getattr__(name: str) -> object:
    if name in _DEFINED_IN:
        return getattr(importlib.import_module(_DEFINED_IN[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CHANNELS", "Backoff", "Channel", "ChannelStats", "open_channel"]
