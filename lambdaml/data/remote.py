"""Input files on S3 (``data prepare --input s3://BUCKET/KEY``), read by the same loaders as local ones.

Each is streamed, a MiB at a time, into a temporary file through the endpoint, region and
credentials of the dataset's own bucket, and the temporary files are removed afterwards. A
loader's message that names a temporary file names the ``s3://`` URI instead.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from lambdaml import aws, keys
from lambdaml.aws_errors import error_code, status_code, translate_botocore
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.errors import ConfigError, DataError, LambdaMLError

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_DENIED = frozenset({"AccessDenied", "403", "Forbidden", "AllAccessDisabled"})


@contextmanager
def local_files(paths: Sequence[str], storage: StorageSpec | Channel) -> Iterator[list[str]]:
    """``paths`` as local files: each ``s3://`` one downloaded to a temporary file, removed on exit.

    The downloads use the storage's endpoint, region and credentials; nothing is written to
    its bucket. A LambdaMLError raised inside that names a temporary file is raised again
    naming its URI.
    """
    remote = [p for p in paths if keys.is_s3_uri(p)]
    for uri in remote:
        keys.split_s3_uri(uri)
    if not remote:
        yield list(paths)
        return
    client = _client(storage)
    with tempfile.TemporaryDirectory(prefix="lambdaml-input-") as folder:
        local: dict[str, str] = {}
        for index, uri in enumerate(remote):
            bucket, key = keys.split_s3_uri(uri)
            target = Path(folder) / str(index) / PurePosixPath(key).name  # the key's suffix picks the format
            target.parent.mkdir()
            _download(client, uri, bucket, key, target)
            local[uri] = str(target)
        try:
            yield [local.get(p, p) for p in paths]
        except LambdaMLError as exc:
            text = str(exc)
            for uri, path in local.items():
                text = text.replace(path, uri)
            if text == str(exc):
                raise
            raise type(exc)(text) from None


def _client(storage: StorageSpec | Channel) -> Any:
    """An S3 client of the dataset bucket's endpoint, region and credentials."""
    if isinstance(storage, StorageSpec):
        return aws.client(
            "s3", endpoint_url=storage.endpoint_url, region=storage.region, connect_timeout_s=storage.connect_timeout_s
        )
    client = getattr(storage, "client", None)
    if storage.kind != "s3" or client is None:
        raise ConfigError(f"an s3:// input is read through S3 storage, not a {storage.kind} channel")
    return client


def _download(client: Any, uri: str, bucket: str, key: str, target: Path) -> None:
    """Stream one object into ``target``; a missing or forbidden one is one line naming the URI."""
    from botocore.exceptions import BotoCoreError, ClientError

    endpoint = str(client.meta.endpoint_url or "AWS")
    written = 0
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        with body, target.open("wb") as out:
            for chunk in body.iter_chunks(_CHUNK):  # each read is bounded by the client's read timeout
                out.write(chunk)
                written += len(chunk)
    except ClientError as exc:
        code = error_code(exc)
        if code == "NoSuchBucket":
            raise DataError(f"cannot read {uri}: no bucket {bucket!r} at {endpoint}") from None
        if code in _MISSING or status_code(exc) == 404:
            raise DataError(f"cannot read {uri}: no such key in bucket {bucket!r}") from None
        if code in _DENIED or status_code(exc) == 403:
            raise DataError(f"cannot read {uri}: access denied ({code or 403})") from None
        raise DataError(
            f"cannot read {uri}: {translate_botocore(exc, service='s3', endpoint=endpoint, what='get')}"
        ) from None
    except (BotoCoreError, ConnectionError) as exc:
        raise DataError(
            f"cannot read {uri}: {translate_botocore(exc, service='s3', endpoint=endpoint, what='get')}"
        ) from None
    except OSError as exc:  # the temporary file: a full disk, say
        raise DataError(f"cannot download {uri} to {target.parent}: {exc}") from None
    log.info("downloaded %s (%d bytes)", uri, written)
