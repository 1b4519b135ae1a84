"""What one S3 request costs the worker's CPU: botocore's default against LambdaML's requests, and obstore.

Run: ``.venv/bin/python bench/s3_requests.py``. A worker's S3 channel puts and gets values
on moto (its own process, so its CPU is not counted here). Three boto3 clients and the channel
itself (whose row also pays the channel's own layers), on the same requests in the same run:

- ``default, http``: botocore's defaults as they behave against moto over plain HTTP: a
  CRC-32 of every request body (``when_supported``), checked on every response, and a
  SHA-256 of every PUT body in the signature (botocore always signs the body over HTTP).
- ``default, as on https``: the same defaults as they behave against AWS, where a body that
  carries a checksum header goes unsigned. This is the reference: what a worker paid on AWS
  before LambdaML changed its client.
- ``checksums off``: LambdaML's boto3 client (``lambdaml.aws.client``): checksums only where an
  operation requires one, and no SHA-256 of the body (``UNSIGNED-PAYLOAD``). Every value
  carries our codec's CRC-32C and its seal, and TLS guards the body on AWS.
- ``lambdaml``: the S3 channel's values as they go: the same requests signed by botocore's
  signer and sent over urllib3 (``lambdaml.channels.s3_objects``), without botocore's request
  machinery (events, endpoint rules, validation, parsing).

If ``obstore`` (Rust's ``object_store``) is importable it is measured too, as the leaner
client to weigh against boto3; it is not a dependency (``pip install obstore`` into a scratch
environment and put it on PYTHONPATH).

Prints, per value size (80 kB, 1 MB: a ScatterReduce piece at d=1e6 and W=4 in float32, and 8 MB),
the worker CPU (process time, all threads) per PUT and per GET for each client, and the
ratio to the reference; writes bench/results/s3_requests.csv.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import numpy as np
from common import report

from lambdaml import aws, codec, settings
from lambdaml.channels.s3 import S3Channel
from lambdaml.local import services

SIZES = [10_000, 125_000, 1_000_000]  # float64 elements: 80 kB, 1 MB and 8 MB values
#: name: (body checksums, the body's SHA-256 in the signature; None: botocore's choice)
BOTO = {
    "default, http": ("when_supported", None),
    "default, as on https": ("when_supported", False),
    "checksums off": ("when_required", False),
}
REFERENCE = "default, as on https"


def cpu_ms_per_request(fn: Callable[[str], object], items: list[str], repeats: int = 3) -> float:
    """Process CPU time per call of ``fn`` on each item, best of ``repeats`` passes, in milliseconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for item in items:
            fn(item)
        best = min(best, time.process_time() - start)
    return 1000 * best / len(items)


def boto_client(url: str, mode: tuple[str, bool | None], value: bytes, names: list[str]) -> tuple[float, float]:
    checksums, sign = mode
    client = aws.client("s3", endpoint_url=url, checksums=checksums, sign_s3_payload=sign)
    bucket = f"b-{secrets.token_hex(4)}"
    S3Channel(client, bucket).ensure()

    def put(key: str) -> None:
        client.put_object(Bucket=bucket, Key=key, Body=value)

    for name in names:  # warm: connections, the bucket, and the keys the gets read
        put(name)
    return cpu_ms_per_request(put, names), cpu_ms_per_request(
        lambda k: client.get_object(Bucket=bucket, Key=k)["Body"].read(), names
    )


def lambdaml_channel(url: str, value: bytes, names: list[str]) -> tuple[float, float]:
    channel = S3Channel(aws.client("s3", endpoint_url=url), f"b-{secrets.token_hex(4)}")
    channel.ensure()
    for name in names:
        channel.put(name, value)
    put = cpu_ms_per_request(lambda k: channel.put(k, value), names)
    return put, cpu_ms_per_request(channel.get, names)


def obstore_client(url: str, value: bytes, names: list[str]) -> tuple[float, float] | None:
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        return None
    bucket = f"b-{secrets.token_hex(4)}"
    S3Channel(aws.client("s3", endpoint_url=url), bucket).ensure()
    store = S3Store(
        bucket, endpoint=url, region="us-east-1", access_key_id=settings.LOCAL_ACCESS_KEY,
        secret_access_key=settings.LOCAL_SECRET_KEY, client_options={"allow_http": True},
        virtual_hosted_style_request=False,
    )  # fmt: skip
    for name in names:
        obstore.put(store, name, value)
    put = cpu_ms_per_request(lambda k: obstore.put(store, k, value), names)
    return put, cpu_ms_per_request(lambda k: obstore.get(store, k).bytes(), names)


def main() -> None:
    moto = services.start_moto()
    try:
        rng = np.random.default_rng(0)
        rows: list[list[str]] = []
        header = ["d", "value kB", "client", "PUT CPU ms", "GET CPU ms", f"CPU per request vs {REFERENCE}"]
        for d in SIZES:
            value = codec.encode(rng.standard_normal(d))
            names = [f"k/{i}" for i in range({10_000: 40, 125_000: 16}.get(d, 8))]
            measured = {f"boto3 {name}": boto_client(moto.url, mode, value, names) for name, mode in BOTO.items()}
            measured["lambdaml"] = lambdaml_channel(moto.url, value, names)
            lean = obstore_client(moto.url, value, names)
            if lean is not None:
                measured["obstore"] = lean
            reference = sum(measured[f"boto3 {REFERENCE}"])
            for client, (put, get) in measured.items():
                ratio = (put + get) / reference
                rows.append([f"{d:.3g}", f"{len(value) / 1e3:.0f}", client, f"{put:.3f}", f"{get:.3f}", f"{ratio:.2f}"])
        report("s3_requests", header, rows)
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
