"""DynamoDB: items in a table, priced per request unit."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from lambdaml.catalogue import ChannelInfo, StackField
from lambdaml.config.channel import AwsServiceSpec


class DynamoDBSpec(AwsServiceSpec):
    kind: Literal["dynamodb"] = "dynamodb"
    table: str | None = Field(None, min_length=3, max_length=255)

    @model_validator(mode="after")
    def _needs_table(self) -> Self:
        if not self.table:
            raise ValueError("a dynamodb channel needs 'table'")
        return self

    @property
    def place(self) -> str:
        return str(self.table)


DESCRIPTION = ChannelInfo(
    "dynamodb",
    "lambdaml.channels.dynamodb:DynamoDBChannel",
    spec=f"{__name__}:DynamoDBSpec",
    title="DynamoDB",
    authenticates_clients=True,  # IAM
    aws_service="dynamodb",
    billed_by="requests",
    prices="dynamodb",
    stack_fields=(StackField("table", "ChannelTableName", "channel table is"),),
)
