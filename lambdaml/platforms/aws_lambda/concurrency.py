"""Whether a job's workers can all run at once in a stack's worker function: BSP waits for every
rank, and the ranks that did start are billed meanwhile."""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError, ClientError

from lambdaml import aws_errors, catalogue
from lambdaml.config import JobSpec
from lambdaml.errors import ConfigError
from lambdaml.platforms.aws_lambda.outputs import TORCH_WORKER, WORKER, StackOutputs

log = logging.getLogger(__name__)

#: What Lambda answers a role that may not read a function's concurrency: the check is skipped.
_DENIED = ("AccessDeniedException", "AccessDenied")


def check_concurrency(job: JobSpec, stack: StackOutputs) -> None:
    """Refuse a job whose workers cannot all run at once.

    A worker function with reserved concurrency runs that many at most; one without shares
    what the account's reservations leave (Lambda's UnreservedConcurrentExecutions).
    """
    output = TORCH_WORKER if catalogue.model(job.model.name).needs == "torch" else WORKER
    if output not in stack.outputs:
        return  # no such worker: the coordinator refuses the job, saying how to deploy it
    function, workers = stack.outputs[output], job.workers
    client = stack.client("lambda")
    try:
        reserved = client.get_function_concurrency(FunctionName=function).get("ReservedConcurrentExecutions")
        shared = None if reserved is not None else client.get_account_settings()["AccountLimit"]
    except ClientError as exc:
        if aws_errors.error_code(exc) in _DENIED:
            log.warning("cannot read the concurrency of %s (%s); not checked", function, aws_errors.error_code(exc))
            return
        raise ConfigError(f"cannot read the concurrency of {function}: {aws_errors.error_code(exc) or exc}") from None
    except BotoCoreError as exc:
        raise ConfigError(f"cannot reach Lambda for stack {stack.name!r}: {exc}") from None
    if reserved is not None and workers > reserved:
        raise ConfigError(
            f"the job needs {workers} workers at once, but {function} has a reserved concurrency of {reserved}; "
            f"lower workers, or redeploy with WorkerReservedConcurrency={workers} or more"
        )
    if shared is not None and workers > shared["UnreservedConcurrentExecutions"]:
        raise ConfigError(
            f"the job needs {workers} workers at once, but the account leaves "
            f"{shared['UnreservedConcurrentExecutions']} of its {shared['ConcurrentExecutions']} concurrent "
            "executions to functions without reserved concurrency; lower workers, or raise the account's "
            "Lambda concurrency quota"
        )
