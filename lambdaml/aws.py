"""boto3 clients built from settings, with bounded timeouts and retries.

Endpoints are settings: pass ``endpoint_url`` (moto, LocalStack) or leave it None for AWS
or for boto3's own ``AWS_ENDPOINT_URL_<SERVICE>`` variables.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlparse

from lambdaml import settings


def is_loopback(endpoint_url: str | None) -> bool:
    if not endpoint_url:
        return False
    host = urlparse(endpoint_url).hostname or ""
    return host == "localhost" or host.startswith("127.")


def has_credentials() -> bool:
    """Whether boto3 finds AWS credentials here: the environment, config files, SSO, a container or
    instance role. Only the last, on EC2, asks the network (the instance metadata service)."""
    import boto3

    return boto3.session.Session().get_credentials() is not None


_session_lock = threading.Lock()
_session: tuple[int, Any] | None = None  # (the process it was made in, the session)


def _shared_session() -> Any:
    """This process's boto3 session. A fresh session reads every service's model and endpoint rules
    from disk again: 140 ms a client instead of 10, and a job makes ten or so. Call under the lock
    (sessions are not thread-safe; the clients they make are)."""
    global _session
    import boto3

    if _session is None or _session[0] != os.getpid():  # a forked child makes its own
        _session = (os.getpid(), boto3.session.Session())
    return _session[1]


def _local_keys(endpoint_url: str | None) -> bool:
    """Whether a client of ``endpoint_url`` signs with the local stack's keys (a loopback endpoint
    and no keys in the environment)."""
    return is_loopback(endpoint_url) and not os.environ.get("AWS_ACCESS_KEY_ID")


def credentials(endpoint_url: str | None) -> Any:
    """The botocore credentials ``client`` signs with for ``endpoint_url``; None if there are none."""
    from botocore.credentials import Credentials

    if _local_keys(endpoint_url):
        return Credentials(settings.LOCAL_ACCESS_KEY, settings.LOCAL_SECRET_KEY)
    with _session_lock:
        return _shared_session().get_credentials()


def client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 60.0,
    max_attempts: int = 3,
    pool: int = 64,
    checksums: str = "when_required",
    sign_s3_payload: bool | None = False,
) -> Any:
    """A boto3 client whose every call is bounded in time.

    Body checksums only where an operation requires one (``checksums``; botocore's default,
    ``when_supported``, adds a CRC-32 of every S3 request body and checks every response's):
    each value we store carries its own CRC-32C and seal, which catch a truncated or corrupted
    value, and a bad value is retried.

    S3 request bodies are not hashed into the signature either (``sign_s3_payload``;
    ``UNSIGNED-PAYLOAD``): without a checksum header botocore would otherwise SHA-256 every PUT
    body, over HTTPS too, which costs more CPU than the CRC-32 it replaced. TLS guards the body on
    AWS, and the seal guards it anywhere. None leaves it to botocore. (The S3 channel's values
    themselves go as signed HTTP requests, ``lambdaml.channels.s3_objects``, configured the same.)
    """
    from botocore.config import Config

    config = Config(
        region_name=region,
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"max_attempts": max_attempts, "mode": "standard"},
        max_pool_connections=pool,
        request_checksum_calculation=checksums,
        response_checksum_validation=checksums,
        s3=None if sign_s3_payload is None else {"payload_signing_enabled": sign_s3_payload},
    )
    local: dict[str, str] = {}
    if _local_keys(endpoint_url):
        local.update(aws_access_key_id=settings.LOCAL_ACCESS_KEY, aws_secret_access_key=settings.LOCAL_SECRET_KEY)
    with _session_lock:
        return _shared_session().client(service, config=config, endpoint_url=endpoint_url, **local)


def wait_for_stack(
    cloudformation: Any, name: str, *, deleted: bool = False, timeout_s: float = 900.0
) -> dict[str, str]:
    """Wait, with backoff, until a stack is created (returns its outputs) or deleted.

    A failed or rolled-back stack raises with CloudFormation's first reason.
    """
    import time

    from botocore.exceptions import ClientError

    from lambdaml.errors import LambdaMLError

    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while time.monotonic() < deadline:
        try:
            stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
        except ClientError as exc:
            if deleted and "does not exist" in str(exc):
                return {}
            raise LambdaMLError(f"cannot read stack {name}: {exc}") from None
        status = stack["StackStatus"]
        if status == ("DELETE_COMPLETE" if deleted else "CREATE_COMPLETE"):
            return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        if status.endswith("FAILED") or status.startswith("ROLLBACK"):
            events = cloudformation.describe_stack_events(StackName=name)["StackEvents"]
            reasons = [e.get("ResourceStatusReason") for e in events if e.get("ResourceStatusReason")]
            raise LambdaMLError(f"stack {name}: {status}: {reasons[:1]}")
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
    raise LambdaMLError(f"stack {name} was not {'deleted' if deleted else 'created'} within {timeout_s:g}s")
