"""Whether a job fits a stack: its data and channel are the stack's own, which are all its functions'
roles can reach. The client checks it when it binds a job to a stack, the coordinator again when
the job arrives, so a mismatch is refused in one line before anything runs."""

from __future__ import annotations

from lambdaml import catalogue
from lambdaml.config import ChannelSpec, JobSpec
from lambdaml.errors import ConfigError
from lambdaml.settings import StackEnvironment


def check_fits_stack(job: JobSpec, stack: StackEnvironment) -> None:
    """Refuse, in one line, a job whose data or channel is not this stack's (its roles reach only its own)."""
    if not stack.in_a_stack:
        return
    bind = "; start it with 'lambdaml train JOB --stack NAME', which binds it to the stack"
    if job.storage.bucket != stack.data_bucket:
        raise ConfigError(f"this stack keeps its data in {stack.data_bucket!r}, not {job.storage.bucket!r}{bind}")
    _check_channel_fits(job.channel, stack, bind)


def _check_channel_fits(channel: ChannelSpec, stack: StackEnvironment, bind: str) -> None:
    """What the channel kind's description says a stack provides, held against the job's channel."""
    kind, info = channel.kind, catalogue.channel(channel.kind)
    if not info.connects_processes:
        shared = catalogue.shared_channels()
        use = " or ".join([", ".join(shared[:-1]), shared[-1]]) if len(shared) > 1 else "".join(shared)
        raise ConfigError(f"the {info.called} channel cannot connect Lambda workers; use {use}")
    for provided in info.stack_fields:
        value, expected = getattr(channel, provided.field), stack.output(provided.output)
        if value != expected:
            raise ConfigError(f"this stack's {provided.named} {expected!r}, not {value!r}{bind}")
    if info.stack_cache and stack.cache_kind is None:
        raise ConfigError(
            f"the job's channel is {kind}, but this stack has no cache; deploy it with one "
            f"(a local stack: lambdaml local up --cache {kind})"
        )
    if info.stack_cache and kind != stack.cache_kind:
        raise ConfigError(f"the job's channel is {kind}, but this stack's cache is {stack.cache_kind}")
