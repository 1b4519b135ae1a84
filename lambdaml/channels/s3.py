"""The S3 channel: objects in a bucket, the slowest but cheapest and always-there substrate.

Values are put and got as signed HTTP requests (``S3Objects``); listing, deleting and the bucket
go through the boto3 client. botocore errors, from either, are translated here, at the boundary,
into lambdaml errors (what is not S3-specific by ``lambdaml.aws_errors``, shared with DynamoDB
and the credentials lookup).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from lambdaml import aws
from lambdaml.aws_errors import THROTTLING_CODES, error_code, status_code, translate_botocore
from lambdaml.channels.base import Channel
from lambdaml.channels.kinds.s3 import DESCRIPTION, S3Spec
from lambdaml.channels.s3_objects import S3Objects
from lambdaml.errors import ChannelError, KeyNotFound, TransientChannelError

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

log = logging.getLogger(__name__)


class S3Channel(Channel):
    """Values as objects in one bucket; listings paginate, deletes go 1,000 keys a request."""

    kind = DESCRIPTION.name
    ranged_reads = DESCRIPTION.ranged_reads

    def __init__(self, client: Any, bucket: str, objects: S3Objects | None = None) -> None:
        super().__init__()
        self.client = client
        self.bucket = bucket
        self.objects = objects or S3Objects.of_client(client)
        self.endpoint = str(client.meta.endpoint_url or "AWS")

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> S3Channel:
        spec = S3Spec.of(spec)
        if not spec.bucket:
            raise ChannelError("an s3 channel needs a bucket")
        client = aws.client(
            "s3", endpoint_url=spec.endpoint_url, region=spec.region, connect_timeout_s=spec.connect_timeout_s
        )
        return cls(client, spec.bucket)

    def describe(self) -> str:
        return f"s3://{self.bucket}"

    def _error(self, exc: Exception, what: str, key: str | None = None) -> ChannelError:
        if isinstance(exc, ClientError):
            code = error_code(exc)
            if code == "NoSuchBucket":
                return ChannelError(f"s3 bucket {self.bucket!r} does not exist (at {self.endpoint})")
            if key is not None and (code in {"NoSuchKey", "404", "NotFound"} or status_code(exc) == 404):
                return KeyNotFound(f"s3://{self.bucket}/{key} not found")
        return translate_botocore(exc, service="s3", endpoint=self.endpoint, what=what)

    def _put(self, key: str, data: bytes) -> None:
        try:
            self.objects.put(self.bucket, key, data)
        except (ClientError, BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, f"put {key}") from exc

    def _put_new(self, key: str, data: bytes) -> bool:
        try:
            self.objects.put(self.bucket, key, data, only_if_absent=True)
        except ClientError as exc:
            if error_code(exc) == "PreconditionFailed" or status_code(exc) == 412:
                return False
            if error_code(exc) == "ConditionalRequestConflict":  # another conditional write is in flight
                raise TransientChannelError(f"s3 put {key}: a concurrent conditional write is in flight") from exc
            raise self._error(exc, f"put {key}") from exc
        except (BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, f"put {key}") from exc
        return True

    def _get(self, key: str) -> bytes:
        try:
            body, _ = self.objects.get(self.bucket, key)
        except (ClientError, BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, f"get {key}", key) from exc
        return body

    def _get_range(self, key: str, start: int, stop: int) -> bytes:
        what = f"get {key} bytes {start}:{stop}"
        try:
            body, content_range = self.objects.get(self.bucket, key, (start, stop))
        except ClientError as exc:
            if error_code(exc) == "InvalidRange" or status_code(exc) == 416:  # starts at or past the end
                # Retried, then it stands: moto can size a fresh object at 0 bytes while its PUT
                # computes the ETag on another thread; S3 answers a wrong range the same each time.
                raise TransientChannelError(
                    f"s3: range {start}:{stop} of {key} starts past the end of the object"
                ) from exc
            raise self._error(exc, what, key) from exc
        except (BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, what, key) from exc
        if len(body) != stop - start:
            # S3 serves what there is of a range that ends past the object; anything else is a cut-off body.
            size = content_range.rpartition("/")[2]
            if size.isdigit() and int(size) >= stop:
                raise TransientChannelError(f"s3 {what}: the body was cut off at {len(body)} bytes")
            # Retried, then it stands, as a range that starts past the end: moto sizes an object it is
            # still writing at what it has written.
            raise TransientChannelError(
                f"s3: range {start}:{stop} of {key} runs past the end of its {size or '?'} bytes"
            )
        return body

    def _list(self, prefix: str) -> Iterable[str]:
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", ()))
        except (ClientError, BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, f"list {prefix!r}") from exc
        return keys

    def _delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
            except (ClientError, BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, f"delete {len(batch)} keys") from exc
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                if first.get("Code") in THROTTLING_CODES:
                    raise TransientChannelError(f"s3 delete throttled ({first.get('Code')})")
                raise ChannelError(
                    f"s3 delete failed for {len(errors)} keys in {self.bucket!r}, first "
                    f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )

    def ensure(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as exc:
            if status_code(exc) != 404 and error_code(exc) not in {"404", "NoSuchBucket", "NotFound"}:
                raise self._error(exc, "head bucket") from exc
        except (BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, "head bucket") from exc
        region = self.client.meta.region_name
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if region and region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self.client.create_bucket(**kwargs)
            log.info("created bucket %s at %s", self.bucket, self.endpoint)
        except ClientError as exc:
            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise self._error(exc, "create bucket") from exc
        except (BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, "create bucket") from exc

    def ping(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (ClientError, BotoCoreError, ConnectionError) as exc:
            if isinstance(exc, ClientError) and status_code(exc) == 404:
                raise ChannelError(f"s3 bucket {self.bucket!r} does not exist (at {self.endpoint})") from exc
            raise self._error(exc, "head bucket") from exc

    def close(self) -> None:
        super().close()
        self.objects.close()
        close = getattr(self.client, "close", None)
        if callable(close):
            close()
