"""The DynamoDB channel: items ``{"k": key, "v": bytes}`` in one table.

Items are capped at 400 KB, so values are chunked by the base above ``max_item_bytes``.
Reads are strongly consistent (a worker must see what another just wrote). Listing is a
Scan filtered by key prefix: it reads the whole table, so keep a job's table small by
clearing finished rounds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from lambdaml import aws
from lambdaml.aws_errors import error_code, translate_botocore
from lambdaml.channels.base import Channel
from lambdaml.channels.kinds.dynamodb import DESCRIPTION, DynamoDBSpec
from lambdaml.errors import ChannelError, KeyNotFound, TransientChannelError

if TYPE_CHECKING:
    from lambdaml.config import ChannelSpec

log = logging.getLogger(__name__)
R = TypeVar("R")

DEFAULT_MAX_ITEM_BYTES = 350_000  # under the 400 KB item limit, with room for the key and names
ITEM_LIMIT_BYTES = 400 * 1024
GET_BATCH = 100  # BatchGetItem's limit
WRITE_BATCH = 25  # BatchWriteItem's limit
UNPROCESSED_TRIES = 8  # bounded backoff on UnprocessedKeys / UnprocessedItems
TABLE_ACTIVE_TIMEOUT_S = 120.0


class DynamoDBChannel(Channel):
    """Values as binary attributes in one table; BatchGetItem for batch reads."""

    kind = DESCRIPTION.name

    def __init__(self, client: Any, table: str, max_item_bytes: int | None = DEFAULT_MAX_ITEM_BYTES) -> None:
        super().__init__()
        if max_item_bytes is None or max_item_bytes > ITEM_LIMIT_BYTES - 2048:
            raise ChannelError(f"dynamodb items hold at most 400 KB: max_item_bytes {max_item_bytes} is too large")
        self.client = client
        self.table = table
        self.max_item_bytes = max_item_bytes
        self.endpoint = str(getattr(getattr(client, "meta", None), "endpoint_url", None) or "AWS")

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> DynamoDBChannel:
        spec = DynamoDBSpec.of(spec)
        if not spec.table:
            raise ChannelError("a dynamodb channel needs a table")
        client = aws.client(
            "dynamodb", endpoint_url=spec.endpoint_url, region=spec.region, connect_timeout_s=spec.connect_timeout_s
        )
        return cls(client, spec.table, spec.max_item_bytes or DEFAULT_MAX_ITEM_BYTES)

    def describe(self) -> str:
        return f"dynamodb://{self.table}"

    def _call(self, what: str, fn: Callable[..., R], **kwargs: Any) -> R:
        """Run one client call, translating botocore errors at the boundary."""
        try:
            return fn(**kwargs)
        except (ClientError, BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, what) from exc

    def _error(self, exc: Exception, what: str) -> ChannelError:
        if isinstance(exc, ClientError) and error_code(exc) == "ResourceNotFoundException":
            return ChannelError(f"dynamodb table {self.table!r} does not exist (at {self.endpoint})")
        return translate_botocore(exc, service="dynamodb", endpoint=self.endpoint, what=what)

    @staticmethod
    def _value(item: dict[str, Any]) -> bytes:
        if "v" in item:
            return bytes(item["v"]["B"])
        return b""

    def _put(self, key: str, data: bytes) -> None:
        self._call(f"put {key}", self.client.put_item, TableName=self.table, Item={"k": {"S": key}, "v": {"B": data}})

    def _get(self, key: str) -> bytes:
        response = self._call(
            f"get {key}", self.client.get_item, TableName=self.table, Key={"k": {"S": key}}, ConsistentRead=True
        )
        item = response.get("Item")
        if item is None:
            raise KeyNotFound(f"dynamodb://{self.table}/{key} not found")
        return self._value(item)

    def _get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        unique = list(dict.fromkeys(keys))  # BatchGetItem rejects duplicates
        batches = [unique[i : i + GET_BATCH] for i in range(0, len(unique), GET_BATCH)]
        found: dict[str, bytes] = {}
        for part in self._map(self._batch_get, batches):
            found.update(part)
        return found

    def _batch_get(self, keys: list[str]) -> dict[str, bytes]:
        request: dict[str, Any] = {self.table: {"Keys": [{"k": {"S": k}} for k in keys], "ConsistentRead": True}}
        found: dict[str, bytes] = {}
        delay = 0.01
        for attempt in range(UNPROCESSED_TRIES):
            response = self._call(f"batch get of {len(keys)} keys", self.client.batch_get_item, RequestItems=request)
            for item in response.get("Responses", {}).get(self.table, []):
                found[item["k"]["S"]] = self._value(item)
            request = response.get("UnprocessedKeys") or {}
            if not request:
                return found
            if attempt < UNPROCESSED_TRIES - 1:
                time.sleep(delay)  # UnprocessedKeys means throttled or over 16 MB: back off a little
                delay = min(delay * 2, 0.5)
        raise TransientChannelError(f"dynamodb {self.table}: batch get left keys unprocessed {UNPROCESSED_TRIES} times")

    def _list(self, prefix: str) -> Iterable[str]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "ProjectionExpression": "#k",
            "ExpressionAttributeNames": {"#k": "k"},
            "ConsistentRead": True,
        }
        if prefix:
            kwargs["FilterExpression"] = "begins_with(#k, :p)"
            kwargs["ExpressionAttributeValues"] = {":p": {"S": prefix}}
        keys: list[str] = []
        while True:
            response = self._call(f"scan {prefix!r}", self.client.scan, **kwargs)
            keys.extend(item["k"]["S"] for item in response.get("Items", []))
            last = response.get("LastEvaluatedKey")
            if not last:
                return keys
            kwargs["ExclusiveStartKey"] = last

    def _delete(self, keys: Sequence[str]) -> None:
        unique = list(dict.fromkeys(keys))  # BatchWriteItem rejects duplicates
        batches = [unique[i : i + WRITE_BATCH] for i in range(0, len(unique), WRITE_BATCH)]
        self._map(self._batch_delete, batches)

    def _batch_delete(self, keys: list[str]) -> None:
        request: dict[str, Any] = {self.table: [{"DeleteRequest": {"Key": {"k": {"S": k}}}} for k in keys]}
        delay = 0.01
        for attempt in range(UNPROCESSED_TRIES):
            response = self._call(
                f"batch delete of {len(keys)} keys", self.client.batch_write_item, RequestItems=request
            )
            request = response.get("UnprocessedItems") or {}
            if not request:
                return
            if attempt < UNPROCESSED_TRIES - 1:
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise TransientChannelError(
            f"dynamodb {self.table}: batch delete left items unprocessed {UNPROCESSED_TRIES} times"
        )

    def ensure(self) -> None:
        status = self._table_status()
        if status is None:
            try:
                self.client.create_table(
                    TableName=self.table,
                    AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                    BillingMode="PAY_PER_REQUEST",
                )
                log.info("created table %s at %s", self.table, self.endpoint)
            except ClientError as exc:
                if error_code(exc) != "ResourceInUseException":  # created concurrently: fine
                    raise self._error(exc, "create table") from exc
            except (BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, "create table") from exc
        deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
        delay = 0.05
        while status != "ACTIVE":
            if time.monotonic() > deadline:
                raise ChannelError(f"dynamodb table {self.table!r} not ACTIVE after {TABLE_ACTIVE_TIMEOUT_S:g}s")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            status = self._table_status()  # None for a moment after CreateTable is fine

    def _table_status(self) -> str | None:
        """The table's status, or None when it does not exist."""
        try:
            response = self.client.describe_table(TableName=self.table)
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise self._error(exc, "describe table") from exc
        except (BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, "describe table") from exc
        return str(response["Table"]["TableStatus"])

    def ping(self) -> None:
        if self._table_status() is None:
            raise ChannelError(f"dynamodb table {self.table!r} does not exist (at {self.endpoint})")

    def close(self) -> None:
        super().close()
        close = getattr(self.client, "close", None)
        if callable(close):
            close()
