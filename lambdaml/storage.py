"""The data store: the S3 bucket that holds datasets, job records, models and results.

It is an S3 channel under the hood, so it shares the channel's error translation,
retries and accounting.
"""

from __future__ import annotations

import json
from typing import Any

from lambdaml.channels import Channel, open_channel
from lambdaml.config import ChannelSpec, StorageSpec
from lambdaml.errors import CodecError, KeyNotFound


def open_storage(spec: StorageSpec) -> Channel:
    return open_channel(
        ChannelSpec(
            kind="s3",
            bucket=spec.bucket,
            endpoint_url=spec.endpoint_url,
            region=spec.region,
            connect_timeout_s=spec.connect_timeout_s,
        )
    )


def put_json(store: Channel, key: str, value: Any) -> None:
    store.put(key, json.dumps(value, indent=1, sort_keys=True).encode("utf-8"))


def get_json(store: Channel, key: str) -> Any:
    """Read a JSON record; raises KeyNotFound or CodecError."""
    return decode_json(store.get(key), key)


def decode_json(raw: bytes, key: str) -> Any:
    """The JSON record read from ``key``; a CodecError if it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, absurd nesting or integers
        raise CodecError(f"{key} is not valid JSON: {str(exc)[:200]}") from None


__all__ = ["KeyNotFound", "decode_json", "get_json", "open_storage", "put_json"]
