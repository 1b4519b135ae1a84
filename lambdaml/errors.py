"""One error hierarchy for the whole platform.

Backend exceptions (botocore, redis, pymemcache) are translated into these at the
channel boundary, so callers and the CLI only ever handle ``LambdaMLError``.
"""

from __future__ import annotations

import reprlib

_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother = 1, 60, 60
_BRIEF.maxlist = _BRIEF.maxdict = _BRIEF.maxtuple = _BRIEF.maxset = 4


def brief(value: object) -> str:
    """A bounded ``repr`` for error messages: a 5,000-character name or a nested bomb stays one short line."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of {value.bit_length()} bits"
    try:
        return _BRIEF.repr(value)
    except ValueError:  # an int of more than 4,300 digits somewhere inside
        return f"a {type(value).__name__}"


class LambdaMLError(Exception):
    """Base of every error the platform raises on purpose; the CLI prints it as one line."""


class ConfigError(LambdaMLError):
    """A job file, option or plug-in name is invalid."""


class UnknownName(ConfigError, KeyError):
    """A registry lookup named something that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CodecError(LambdaMLError):
    """A value on a channel or in a bucket is truncated, corrupt or not what was expected."""


class DataError(LambdaMLError):
    """A dataset file or shard is malformed or missing."""


class ChannelError(LambdaMLError):
    """A storage channel operation failed."""


class KeyNotFound(ChannelError, KeyError):
    """The key does not exist on the channel."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ChannelUnavailable(ChannelError):
    """The channel's endpoint cannot be reached (refused, timed out, wrong credentials)."""


class ChannelUnreachable(ChannelUnavailable):
    """The endpoint did not answer (refused, reset, timed out): a restarting server comes back."""


class TransientChannelError(ChannelError):
    """A failure worth retrying (throttling, a truncated body, a reset connection)."""


class SyncTimeout(LambdaMLError):
    """A bounded wait for other workers ran out of time."""


class WorkerError(LambdaMLError):
    """A worker failed; the job cannot finish."""


class JobFailed(LambdaMLError):
    """The job as a whole failed (a worker died, diverged, or timed out)."""


class Diverged(JobFailed):
    """Training produced NaN or infinity; the job stops before writing it anywhere."""


class JobCancelled(LambdaMLError):
    """Someone cancelled the job."""
