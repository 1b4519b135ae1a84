"""boto3 clients built from settings, with bounded timeouts and retries.

Endpoints are settings: pass ``endpoint_url`` (moto, LocalStack) or leave it None for AWS
or for boto3's own ``AWS_ENDPOINT_URL_<SERVICE>`` variables.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from lambdaml import settings


def is_loopback(endpoint_url: str | None) -> bool:
    if not endpoint_url:
        return False
    host = urlparse(endpoint_url).hostname or ""
    return host == "localhost" or host.startswith("127.")


def client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str = "us-east-1",
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 60.0,
    max_attempts: int = 3,
    pool: int = 64,
) -> Any:
    """A boto3 client whose every call is bounded in time."""
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=region,
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"max_attempts": max_attempts, "mode": "standard"},
        max_pool_connections=pool,
    )
    kwargs: dict[str, Any] = {"config": config, "endpoint_url": endpoint_url}
    if is_loopback(endpoint_url) and not os.environ.get("AWS_ACCESS_KEY_ID"):
        kwargs["aws_access_key_id"] = settings.LOCAL_ACCESS_KEY
        kwargs["aws_secret_access_key"] = settings.LOCAL_SECRET_KEY
    return boto3.session.Session().client(service, **kwargs)
