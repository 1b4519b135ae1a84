"""S3: a bucket of objects, priced per request."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from lambdaml.catalogue import ChannelInfo, StackField
from lambdaml.config.channel import AwsServiceSpec
from lambdaml.config.urls import check_bucket_name


class S3Spec(AwsServiceSpec):
    kind: Literal["s3"] = "s3"
    bucket: str | None = Field(None, min_length=3, max_length=63)

    _bucket = field_validator("bucket")(check_bucket_name)

    @model_validator(mode="after")
    def _needs_bucket(self) -> Self:
        if not self.bucket:
            raise ValueError("an s3 channel needs 'bucket'")
        return self

    @property
    def place(self) -> str:
        return str(self.bucket)


DESCRIPTION = ChannelInfo(
    "s3",
    "lambdaml.channels.s3:S3Channel",
    spec=f"{__name__}:S3Spec",
    title="S3",
    ranged_reads=True,  # HTTP Range: a GET of part of an object costs what any GET costs
    authenticates_clients=True,  # IAM
    aws_service="s3",
    billed_by="requests",
    prices="s3",
    stack_fields=(StackField("bucket", "CommBucketName", "S3 channel is bucket"),),
)
