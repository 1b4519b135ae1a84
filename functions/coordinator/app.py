"""Coordinator Lambda entry point: a thin shell over ``lambdaml.platforms.aws_lambda.handlers.coordinate``.

It starts a job's workers, and is also the worker's on-failure destination, so it can resume a
worker whose retries ran out.
"""

from __future__ import annotations

from typing import Any


def handler(event: dict[str, Any], context: Any) -> Any:
    from lambdaml.platforms.aws_lambda.handlers import coordinate  # lazy: keep the cold start small

    return coordinate(event, context)
