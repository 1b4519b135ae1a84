"""The S3 channel's values go as signed HTTP requests: what they carry, how their failures are
translated, and that a server which checks signatures accepts them.

Failures come from a small S3 stand-in on a loopback port that answers each request with the
next canned reply and records what it was sent; signatures are checked by a moto server that
authenticates every request after the first few (``INITIAL_NO_AUTH_ACTION_COUNT``).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials

from lambdaml import aws
from lambdaml.channels.s3 import S3Channel
from lambdaml.channels.s3_objects import S3Objects
from lambdaml.errors import ChannelError, ChannelUnavailable, KeyNotFound, TransientChannelError
from lambdaml.local import services

pytestmark = pytest.mark.timeout(120)

Reply = tuple[int, bytes, dict[str, str]]  # status, body, headers (a "cut" header: send the body short)


def s3_error(status: int, code: str) -> Reply:
    return status, f"<Error><Code>{code}</Code><Message>{code} here</Message></Error>".encode(), {}


class FakeS3:
    """Answers requests with ``replies`` in turn (then 200s) and records (method, path, headers, body)."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                status, payload, headers = fake.replies.pop(0) if fake.replies else (200, b"", {})
                cut = headers.pop("cut", None)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload[: int(cut)] if cut else payload)
                if cut:
                    self.close_connection = True

            do_GET = do_PUT = do_POST = do_HEAD = _answer

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def channel(self) -> S3Channel:
        return S3Channel(aws.client("s3", endpoint_url=self.url, max_attempts=1), "comm-bucket")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeS3]:
    server = FakeS3()
    yield server
    server.close()


# ---- failures translated -------------------------------------------------------------


def test_a_missing_key_is_key_not_found_and_a_missing_bucket_names_the_bucket(fake: FakeS3) -> None:
    chan = fake.channel()
    fake.replies = [s3_error(404, "NoSuchKey"), s3_error(404, "NoSuchBucket"), s3_error(404, "NoSuchBucket")]
    with pytest.raises(KeyNotFound, match=r"s3://comm-bucket/comm/a not found"):
        chan.get("comm/a")
    with pytest.raises(ChannelError, match="comm-bucket") as info:
        chan.get("comm/a")
    assert not isinstance(info.value, KeyNotFound)
    with pytest.raises(ChannelError, match="comm-bucket"):
        chan.list("comm/")  # the boto3 client's error, translated the same way


def test_throttling_is_retried_then_gives_up(fake: FakeS3) -> None:
    chan = fake.channel()
    fake.replies = [s3_error(503, "SlowDown"), s3_error(503, "SlowDown")]
    chan.put("comm/a", b"x")  # succeeds on the third try
    assert [method for method, *_ in fake.seen] == ["PUT"] * 3
    fake.replies = [s3_error(503, "SlowDown")] * (chan.transient_retries + 1)
    with pytest.raises(ChannelError, match="gave up") as info:
        chan.put("comm/a", b"x")
    assert not isinstance(info.value, TransientChannelError)
    assert len(fake.seen) == 3 + chan.transient_retries + 1


def test_a_body_cut_short_is_read_again(fake: FakeS3) -> None:
    chan = fake.channel()
    fake.replies = [(200, b"whole", {"cut": "2"}), (200, b"whole", {})]
    assert chan.get("comm/a") == b"whole"
    assert len(fake.seen) == 2


def test_refused_credentials_and_a_conditional_write_that_loses(fake: FakeS3) -> None:
    chan = fake.channel()
    fake.replies = [s3_error(403, "AccessDenied"), s3_error(412, "PreconditionFailed")]
    with pytest.raises(ChannelUnavailable, match="refused the credentials for put comm/a: AccessDenied"):
        chan.put("comm/a", b"x")
    assert chan.put_new("comm/a", b"x") is False


# ---- what the requests carry ----------------------------------------------------------


def test_values_carry_no_botocore_checksum_nor_a_body_hash_but_batch_deletes_do(fake: FakeS3) -> None:
    chan = fake.channel()
    fake.replies = [(200, b"", {}), (200, b"", {}), (206, b"lo", {"Content-Range": "bytes 2-3/5"})]
    chan.put("comm/a b", b"x" * 100_000)
    assert chan.put_new("comm/n", b"y")
    assert chan._get_range("comm/a b", 2, 4) == b"lo"
    fake.replies = [(200, b"<DeleteResult/>", {})]
    chan.delete(["comm/a b"])
    (put, put_new, ranged, delete) = fake.seen
    assert put[:2] == ("PUT", "/comm-bucket/comm/a%20b") and put[3] == b"x" * 100_000
    for _, _, headers, _ in (put, put_new):
        assert not any(h.startswith("x-amz-checksum") or h in ("content-md5", "expect") for h in headers)
        assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
        assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert put_new[2]["if-none-match"] == "*" and "if-none-match" not in put[2]
    assert ranged[0] == "GET" and ranged[2]["range"] == "bytes=2-3" and "x-amz-checksum-mode" not in ranged[2]
    # DeleteObjects requires a checksum (S3 refuses it without): botocore still sends one there.
    assert delete[0] == "POST" and any(h.startswith(("x-amz-checksum", "content-md5")) for h in delete[2])


def test_a_bucket_name_boto3_refuses_is_refused_before_any_request(fake: FakeS3) -> None:
    chan = S3Channel(aws.client("s3", endpoint_url=fake.url), "../../etc")
    with pytest.raises(ChannelError, match=r'Invalid bucket name "\.\./\.\./etc"'):
        chan.get("comm/a")
    assert fake.seen == []


def test_on_aws_a_bucket_is_addressed_virtual_hosted_and_a_custom_endpoint_path_style() -> None:
    creds = Credentials("AKID", "secret")
    on_aws = S3Objects(
        endpoint_url="https://s3.amazonaws.com", region="eu-west-1", credentials=creds,
        connect_timeout_s=1, read_timeout_s=1, pool=1,
    )  # fmt: skip
    assert on_aws.url("bucket", "comm/j/a b") == "https://bucket.s3.eu-west-1.amazonaws.com/comm/j/a%20b"
    assert on_aws.url("dotted.bucket", "k") == "https://s3.amazonaws.com/dotted.bucket/k"
    local = S3Objects(
        endpoint_url="http://127.0.0.1:5000/", region="us-east-1", credentials=creds,
        connect_timeout_s=1, read_timeout_s=1, pool=1,
    )  # fmt: skip
    assert local.url("bucket", "k/1") == "http://127.0.0.1:5000/bucket/k/1"


# ---- signatures a checking server accepts ---------------------------------------------


@pytest.fixture
def checking_moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, str]]]:
    """A moto server that authenticates every request after the three that make an IAM user
    allowed all of S3, and that user's access key."""
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "3")
    moto = services.start_moto()
    try:
        iam = aws.client("iam", endpoint_url=moto.url)
        iam.create_user(UserName="worker")
        key = iam.create_access_key(UserName="worker")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName="worker", PolicyName="s3", PolicyDocument=json.dumps(policy))
        yield moto.url, key
    finally:
        moto.stop()


def test_a_server_that_checks_signatures_accepts_the_values_requests(checking_moto: tuple[str, dict[str, str]]) -> None:
    url, key = checking_moto
    client = boto3.session.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name="us-east-1"
    ).client("s3", endpoint_url=url)
    bucket = f"signed-{secrets.token_hex(4)}"
    client.create_bucket(Bucket=bucket)
    secret = Credentials(key["AccessKeyId"], key["SecretAccessKey"])
    signed = S3Channel(client, bucket, S3Objects.of_client(client, secret))
    signed.put("comm/j/a b+c", b"v" * 5000)
    assert signed.put_new("comm/j/a b+c", b"w") is False
    assert signed.get("comm/j/a b+c") == b"v" * 5000
    assert signed._get_range("comm/j/a b+c", 10, 20) == b"v" * 10
    forged = S3Channel(client, bucket, S3Objects.of_client(client, Credentials(key["AccessKeyId"], "not-the-secret")))
    with pytest.raises(ChannelUnavailable, match="SignatureDoesNotMatch"):
        forged.get("comm/j/a b+c")
