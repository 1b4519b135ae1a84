"""S3 requests carry no body checksum of botocore's own: every value has its codec CRC-32 and its seal."""

from __future__ import annotations

import secrets
from typing import Any

from lambdaml import aws
from lambdaml.channels.s3 import S3Channel


def test_puts_and_gets_carry_no_botocore_checksum_but_batch_deletes_still_do(moto_url: str) -> None:
    client = aws.client("s3", endpoint_url=moto_url)
    sent: list[tuple[str, dict[str, str]]] = []

    def record(request: Any, **_: Any) -> None:
        sent.append((request.method, {k.lower(): v for k, v in request.headers.items()}))

    client.meta.events.register("before-send.s3", record)
    channel = S3Channel(client, f"sums-{secrets.token_hex(4)}")
    channel.ensure()
    channel.put("k", b"x" * 100_000)
    assert channel.get("k") == b"x" * 100_000
    channel.delete(["k"])

    puts = [headers for method, headers in sent if method == "PUT" and "content-length" in headers]
    assert puts and not any(
        h.startswith("x-amz-checksum") or h == "x-amz-sdk-checksum-algorithm" for p in puts for h in p
    )
    # Nor a SHA-256 of the body in the signature: botocore hashes every body it sends without a
    # checksum header, over HTTPS too, unless payload signing is off.
    assert all(p["x-amz-content-sha256"] in ("UNSIGNED-PAYLOAD", b"UNSIGNED-PAYLOAD") for p in puts)
    gets = [headers for method, headers in sent if method == "GET"]
    assert gets and all(h.get("x-amz-checksum-mode") is None for h in gets)
    # DeleteObjects requires a checksum (S3 refuses it without): botocore still sends one there.
    deletes = [headers for method, headers in sent if method == "POST"]
    assert deletes and all(any(h.startswith(("x-amz-checksum", "content-md5")) for h in d) for d in deletes)


def _recorder(sent: list[dict[str, str]]) -> Any:
    def record(request: Any, **_: Any) -> None:
        sent.append({k.lower(): v for k, v in request.headers.items()})

    return record


def test_a_put_sends_its_bytes_at_once_and_a_get_parses_no_dates(moto_url: str) -> None:
    """Without ``Expect: 100-continue`` a PUT does not wait a round trip for the server's interim
    answer before its body; botocore's own client (``put_bytes_as_is=False``) still would."""
    expected: dict[bool, bool] = {True: False, False: True}  # put_bytes_as_is: whether a PUT expects 100
    for as_is, expects in expected.items():
        client = aws.client("s3", endpoint_url=moto_url, put_bytes_as_is=as_is)
        sent: list[dict[str, str]] = []
        client.meta.events.register("before-send.s3.PutObject", _recorder(sent))
        channel = S3Channel(client, f"expect-{secrets.token_hex(4)}")
        channel.ensure()
        channel.put("k", b"y" * 50_000)
        assert channel.put_new("k", b"z") is False  # a conditional write still refuses an existing key
        assert channel.get("k") == b"y" * 50_000
        assert len(sent) == 2 and all(("expect" in h) is expects for h in sent)
    read = aws.client("s3", endpoint_url=moto_url).get_object(Bucket=channel.bucket, Key="k")
    assert "LastModified" not in read and read["Body"].read() == b"y" * 50_000
    ranged = aws.client("s3", endpoint_url=moto_url).get_object(Bucket=channel.bucket, Key="k", Range="bytes=0-9")
    assert ranged["ContentRange"] == "bytes 0-9/50000"
