"""``LambdaStack``: the platform interface on Lambda, for a stack that ``template.yaml`` deployed."""

from __future__ import annotations

from lambdaml.config import JobSpec
from lambdaml.platforms.aws_lambda.concurrency import check_concurrency
from lambdaml.platforms.aws_lambda.invoke import call_coordinator
from lambdaml.platforms.aws_lambda.logs import job_logs
from lambdaml.platforms.aws_lambda.outputs import StackOutputs
from lambdaml.platforms.base import DeployedStack, LogLine
from lambdaml.runtime.events import CoordinatorEvent
from lambdaml.runtime.status import JobStatus


class LambdaStack(StackOutputs, DeployedStack):
    """A stack on AWS (or on moto, as a local stack), known by its CloudFormation outputs: its
    environment, data bucket and channel fields are read from them (``StackOutputs``)."""

    def check_capacity(self, job: JobSpec) -> None:
        check_concurrency(job, self)

    def coordinate(self, event: CoordinatorEvent) -> JobStatus:
        return call_coordinator(self, event)

    def job_logs(self, job_id: str) -> list[LogLine]:
        return job_logs(self, job_id)
