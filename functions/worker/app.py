"""Worker Lambda entry point (zip and container image): a thin shell over
``lambdaml.platforms.aws_lambda.handlers.work``.
"""

from __future__ import annotations

import logging
from typing import Any

# Lambda's runtime logs WARNING and above unless told otherwise; each invocation's first line (its
# job, rank and attempt, which ``lambdaml logs`` matches) is INFO.
logging.getLogger("lambdaml").setLevel(logging.INFO)


def handler(event: dict[str, Any], context: Any) -> Any:
    from lambdaml.platforms.aws_lambda.handlers import work  # lazy: keep the cold start small

    return work(event, context)
