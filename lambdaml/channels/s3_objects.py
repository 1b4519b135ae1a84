"""S3's object reads and writes as signed HTTP requests: a worker's hot path without botocore's machinery.

A round's PUTs and GETs are nearly all of a worker's S3 CPU, and below a few MB botocore's
request machinery (events, endpoint rules, parameter validation, response parsing) costs more
than the HTTP itself. These four requests are signed by botocore's own SigV4 signer, with the
body unsigned as the boto3 client is configured (``UNSIGNED-PAYLOAD``), and sent over urllib3,
the HTTP client botocore itself uses. Failures are raised as botocore's exceptions, so the S3
channel translates every S3 failure in one place. Listing, deleting and the bucket itself stay
on the boto3 client.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlparse

import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.handlers import validate_bucket_name

from lambdaml import aws

_UNSIGNED_BODY = {"client_config": Config(s3={"payload_signing_enabled": False})}
_ERROR_FIELD = re.compile(rb"<(Code|Message)>([^<]*)</\1>")


class S3Objects:
    """PUT, conditional PUT, GET and ranged GET of one bucket's objects.

    ``credentials`` is botocore's (static or refreshing); a request signs with a frozen copy.
    On AWS a bucket is addressed virtual-hosted style; at a custom endpoint (moto), path style.
    """

    def __init__(
        self,
        *,
        endpoint_url: str,
        region: str,
        credentials: Any,
        connect_timeout_s: float,
        read_timeout_s: float,
        pool: int,
    ) -> None:
        self.endpoint_url = endpoint_url.rstrip("/")
        self.region = region
        self.credentials = credentials
        self._on_aws = (urlparse(self.endpoint_url).hostname or "").endswith(".amazonaws.com")
        self._http = urllib3.PoolManager(
            maxsize=pool,
            timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
            retries=False,  # the channel retries, with its backoff, what is worth retrying
        )

    @classmethod
    def of_client(cls, client: Any, credentials: Any = None) -> S3Objects:
        """The same endpoint, region, timeouts and pool size as a boto3 S3 client made by
        ``aws.client``, signing with ``credentials`` (None: the ones that client signs with)."""
        config = client.meta.config
        return cls(
            endpoint_url=client.meta.endpoint_url,
            region=client.meta.region_name,
            credentials=aws.credentials(client.meta.endpoint_url) if credentials is None else credentials,
            connect_timeout_s=config.connect_timeout,
            read_timeout_s=config.read_timeout,
            pool=config.max_pool_connections,
        )

    def url(self, bucket: str, key: str) -> str:
        path = quote(key, safe="/~")
        if self._on_aws and "." not in bucket:
            return f"https://{bucket}.s3.{self.region}.amazonaws.com/{path}"
        return f"{self.endpoint_url}/{bucket}/{path}"

    def put(self, bucket: str, key: str, data: bytes, *, only_if_absent: bool = False) -> None:
        headers = {"If-None-Match": "*"} if only_if_absent else {}
        self._request("PUT", bucket, key, "PutObject", headers, data)

    def get(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> tuple[bytes, str]:
        """The object's bytes (``byte_range``: start and stop, stop exclusive) and its Content-Range."""
        headers = {} if byte_range is None else {"Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"}
        response = self._request("GET", bucket, key, "GetObject", headers, None)
        return response.data, str(response.headers.get("Content-Range", ""))

    def close(self) -> None:
        self._http.clear()

    def _request(
        self, method: str, bucket: str, key: str, operation: str, headers: dict[str, str], body: bytes | None
    ) -> Any:
        validate_bucket_name({"Bucket": bucket})  # as boto3 would: a "/" in it would address another path
        url = self.url(bucket, key)
        if self.credentials is None:
            raise NoCredentialsError()
        request = AWSRequest(method, url, headers=headers, data=body)
        request.context.update(_UNSIGNED_BODY)
        S3SigV4Auth(self.credentials.get_frozen_credentials(), "s3", self.region).add_auth(request)
        try:
            response = self._http.request(
                method, url, body=body, headers=dict(request.headers.items()), redirect=False, decode_content=False
            )
        except urllib3.exceptions.NewConnectionError as exc:  # refused, or no route (before its parent class)
            raise EndpointConnectionError(endpoint_url=url, error=exc) from exc
        except urllib3.exceptions.ConnectTimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise ReadTimeoutError(endpoint_url=url, error=exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # A connection dropped, or a body cut short of its Content-Length (ProtocolError): worth another try.
            raise ConnectionClosedError(endpoint_url=url, error=exc) from exc
        if response.status >= 300:
            fields = dict(_ERROR_FIELD.findall(response.data[:4096]))
            error = {
                "Code": fields.get(b"Code", str(response.status).encode()).decode(errors="replace"),
                "Message": fields.get(b"Message", b"").decode(errors="replace"),
            }
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": response.status}}, operation)
        return response
