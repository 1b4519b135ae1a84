"""The built-in channel kinds, one module each: its job-file model (a ``ChannelSpec``) and its
description (``DESCRIPTION``, a ``ChannelInfo``), importing no client library.

The catalogue reads ``DESCRIPTIONS`` the first time it is asked about a channel. A kind's channel
class (``lambdaml/channels/<kind>.py``) reads its capabilities from its description here.
"""

DESCRIPTIONS = tuple(
    f"{__name__}.{kind}:DESCRIPTION" for kind in ("s3", "redis", "memcached", "dynamodb", "memory", "direct")
)
