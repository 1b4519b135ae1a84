"""A stack found by its name: a local stack that ``lambdaml local up`` recorded, or one CloudFormation
deployed on AWS. A local stack's name never reaches AWS: its record names loopback endpoints only,
CloudFormation's among them."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lambdaml import aws, keys, settings
from lambdaml.errors import ConfigError
from lambdaml.platforms.aws_lambda.stack import LambdaStack


def local_stacks() -> Path:
    """Where ``lambdaml local up`` records the endpoints of local stacks."""
    return settings.home() / "stacks"


def record_path(name: str) -> Path:
    """Where ``lambdaml local up`` records a local stack of this name."""
    return local_stacks() / f"{keys.check_name(name, 'stack name')}.json"


def local_stack_names() -> list[str]:
    """The stacks ``lambdaml local up`` has recorded (up, or down since)."""
    return sorted(path.stem for path in local_stacks().glob("*.json"))


def local_record(name: str) -> dict[str, Any] | None:
    """What ``lambdaml local up`` recorded of a stack (its JSON record), or None where it recorded
    nothing of that name.

    A record's endpoints are all loopback and include CloudFormation's, so a local stack's name
    never reaches AWS; a record that breaks this is refused.
    """
    path = record_path(name)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"local stack {name!r}: cannot read {path}: {exc}") from None
    endpoints = record.get("endpoints") if isinstance(record, dict) else None
    if (
        not isinstance(endpoints, dict)
        or "cloudformation" not in endpoints
        or not all(isinstance(url, str) and aws.is_loopback(url) for url in endpoints.values())
    ):
        raise ConfigError(
            f"local stack {name!r}: {path} names no loopback endpoints; delete it and run lambdaml local up"
        )
    checked: dict[str, Any] = record
    return checked


def refusing_endpoint(record: dict[str, Any]) -> str | None:
    """The first of a local stack's endpoints where nothing accepts a connection: the stack is down."""
    for url in dict.fromkeys(record["endpoints"].values()):
        address = urlparse(url)
        try:
            with socket.create_connection((address.hostname or "127.0.0.1", address.port or 80), timeout=1.0):
                pass
        except OSError:
            return str(url)
    return None


def resolve_stack(name: str, *, region: str = "us-east-1") -> LambdaStack:
    """Read a stack's outputs: a local stack's endpoints come from ``lambdaml local up``, others are AWS's."""
    record = local_record(name)
    if record is None:
        return LambdaStack(name, _aws_outputs(name, region), region)
    down = refusing_endpoint(record)
    if down is not None:
        raise ConfigError(
            f"local stack {name!r} is down (nothing answers at {down}); start it with: lambdaml local up --name {name}"
        )
    endpoints, region = record["endpoints"], record.get("region", region)
    cloudformation = aws.client("cloudformation", endpoint_url=endpoints["cloudformation"], region=region)
    try:
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except Exception as exc:  # botocore's errors: moto lost the stack, or stopped answering
        raise ConfigError(f"cannot read local stack {name!r}: {exc}") from None
    outputs = _outputs_of(stacks[0])
    return LambdaStack(name, {**outputs, **record.get("outputs", {})}, region, endpoints)  # the local cache's too


def _aws_outputs(name: str, region: str) -> dict[str, str]:
    """A deployed stack's outputs; a name AWS does not know (or cannot be asked about) is one line."""
    from botocore.exceptions import ClientError

    local = f"local stacks: {', '.join(local_stack_names()) or 'none'}"
    if not aws.has_credentials():
        raise ConfigError(f"unknown stack {name!r}; {local} (and no AWS credentials to look for a deployed one)")
    try:
        stacks = aws.client("cloudformation", region=region).describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            raise ConfigError(f"unknown stack {name!r}: not deployed in {region}; {local}") from None
        raise ConfigError(f"cannot read stack {name!r}: {exc}") from None
    except Exception as exc:  # botocore's others: no way to reach AWS
        raise ConfigError(f"cannot read stack {name!r}: {exc}") from None
    return _outputs_of(stacks[0])


def _outputs_of(described: Any) -> dict[str, str]:
    """A stack's outputs from CloudFormation's ``DescribeStacks`` answer for it, by output key."""
    return {str(o["OutputKey"]): str(o["OutputValue"]) for o in described.get("Outputs", [])}
