"""The URLs and names a job file may hold: endpoints, bucket names, MLflow tracking URIs."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from lambdaml.errors import ConfigError, brief

_ENDPOINT_HINT = "endpoint must be an http(s) URL like http://127.0.0.1:5000"
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")  # botocore's rule: no "_", no leading "-"


def _is_host(host: str, bracketed: bool) -> bool:
    if bracketed:  # [::1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    return len(host) <= 255 and all(_HOST_LABEL.match(label) for label in host.removesuffix(".").split("."))


def _is_endpoint(url: str) -> bool:
    """Whether ``url`` can be an S3, DynamoDB or Secrets Manager endpoint: http(s)://host[:port][/path].

    botocore takes any string and fails deep inside with a traceback (``file:`` included), so
    anything else is refused here, in one line.
    """
    if not url or any(c.isspace() or not c.isprintable() for c in url):  # urlsplit drops some silently
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port out of range or not a number
    except ValueError:
        return False
    if "@" in parts.netloc or parts.query or parts.fragment:  # user:password@, ?query, #fragment
        return False
    host = parts.hostname
    return parts.scheme in ("http", "https") and bool(host) and _is_host(host or "", parts.netloc.startswith("["))


def _has_credentials(url: str) -> bool:
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


#: Credentials in an endpoint URL are refused: boto3 signs with AWS keys and ignores them, and
#: the job file is stored with the job and copied into results, where a password would leak.
_CREDENTIALS = "an endpoint URL never carries credentials (AWS keys come from the environment)"


def checked_endpoint_url(url: str | None) -> str | None:
    """The one validator of every spec's ``endpoint_url``; pydantic adds the field's path and the input."""
    if url is not None and not _is_endpoint(url):
        raise ValueError(_ENDPOINT_HINT)
    return url


def _has_query(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.query or parts.fragment)


def redacted_url(url: str) -> str:
    """A URL as an error may show it: its query and fragment (a presigned token, a key) left out."""
    return url.split("?", 1)[0].split("#", 1)[0] + (" (query left out)" if _has_query(url) else "")


def refuse_url_credentials(data: Any) -> Any:
    # Before the fields, on the whole spec: a field's error would echo its input, password and all.
    if isinstance(data, dict) and isinstance(data.get("endpoint_url"), str) and _has_credentials(data["endpoint_url"]):
        raise ValueError(f"endpoint_url: {_CREDENTIALS}")
    return data


def check_endpoint_url(url: str | None, option: str) -> str | None:
    """An ``--endpoint-url`` option, checked before any client is built; ConfigError otherwise."""
    if url is not None and _has_credentials(url):
        raise ConfigError(f"{option}: {_CREDENTIALS}")
    if url is not None and not _is_endpoint(url):
        raise ConfigError(f"{option}: {_ENDPOINT_HINT} (got {brief(redacted_url(url))})")
    return url


#: S3's bucket naming rules (general purpose buckets): what AWS refuses is refused here, in one line.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def check_bucket_name(name: str | None) -> str | None:
    """An S3 bucket name as AWS accepts it, or a ValueError saying which rule it breaks."""
    if name is None:
        return None
    if not _BUCKET.fullmatch(name):
        raise ValueError(
            f"{brief(name)} is not an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    if ".." in name or ".-" in name or "-." in name:
        raise ValueError(f"{brief(name)} is not an S3 bucket name: no '..', '.-' or '-.'")
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        raise ValueError(f"{brief(name)} is not an S3 bucket name: it is formatted as an IP address")
    if name.startswith(_BUCKET_RESERVED_PREFIXES) or name.endswith(_BUCKET_RESERVED_SUFFIXES):
        raise ValueError(f"{brief(name)} is not an S3 bucket name: its prefix or suffix is reserved by AWS")
    return name


#: The tracking URI forms MLflow's client opens: a server, a local store, Databricks.
_TRACKING_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
_TRACKING_HINT = (
    "must be an MLflow tracking URI like http://127.0.0.1:5000, sqlite:///mlflow.db, file:///path/mlruns or databricks"
)


def check_tracking_uri(uri: str) -> str:
    """An MLflow tracking URI: a known scheme, no credentials (the job file is stored with the job)."""
    if uri == "databricks":  # the workspace of the default Databricks profile
        return uri
    if not uri or any(not c.isprintable() for c in uri):  # urlsplit drops tabs and newlines silently
        raise ValueError(_TRACKING_HINT)
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 -- raises on a port out of range or not a number
    except ValueError:
        raise ValueError(_TRACKING_HINT) from None
    scheme = parts.scheme.split("+")[0]  # postgresql+psycopg2://, mysql+pymysql://
    if scheme not in _TRACKING_SCHEMES:
        raise ValueError(_TRACKING_HINT)
    if scheme in ("http", "https") and (
        parts.query or parts.fragment or not _is_host(parts.hostname or "", parts.netloc.startswith("["))
    ):  # a server is host[:port][/path]; a ?token= would be stored with the job
        raise ValueError(_TRACKING_HINT)
    return uri


def refuse_tracking_credentials(data: Any) -> Any:
    # Before the field, as for endpoints: a field's error would echo its input, password and all.
    if isinstance(data, dict) and isinstance(data.get("mlflow"), str) and _has_credentials(data["mlflow"]):
        raise ValueError(
            "mlflow: a tracking URI never carries credentials (the job file is stored with the job); "
            "MLflow reads a server's from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
        )
    return data
