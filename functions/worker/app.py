"""Worker Lambda entry point (zip and container image): a thin shell over ``lambdaml.runtime.lambda_handlers.work``."""

from __future__ import annotations

from typing import Any


def handler(event: dict[str, Any], context: Any) -> Any:
    from lambdaml.runtime.lambda_handlers import work  # lazy: keep the cold start small

    return work(event, context)
