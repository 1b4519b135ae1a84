"""botocore's failures translated into lambdaml's errors: the one place that reads AWS error codes.

Channels (S3, DynamoDB) and the Secrets Manager lookup of cache credentials all speak
botocore; each translates what is specific to it and hands the rest to ``translate_botocore``.
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    FlexibleChecksumError,
    IncompleteReadError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from lambdaml.errors import ChannelError, ChannelUnavailable, ChannelUnreachable, TransientChannelError

# Error codes that mean "slow down and try again" on AWS services.
THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "InternalError",
        "InternalServerError",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
# A body that arrived cut short or corrupted: retrying the request fetches it again.
_TRUNCATED_BODY = (FlexibleChecksumError, IncompleteReadError, ResponseStreamingError, ConnectionClosedError)
_UNREACHABLE = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def status_code(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def translate_botocore(exc: Exception, *, service: str, endpoint: str, what: str) -> ChannelError:
    """Map a botocore failure that is not resource-specific onto the lambdaml error hierarchy."""
    if isinstance(exc, ClientError):
        code, status = error_code(exc), status_code(exc)
        if code in THROTTLING_CODES or status in _TRANSIENT_STATUS:
            return TransientChannelError(f"{service} {what}: throttled or unavailable ({code or status})")
        if code in {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "UnrecognizedClientException"}:
            return ChannelUnavailable(f"{service} at {endpoint} refused the credentials for {what}: {code}")
        return ChannelError(f"{service} {what} failed: {code or status}: {exc}")
    if isinstance(exc, _TRUNCATED_BODY):
        return TransientChannelError(f"{service} {what}: body truncated or corrupt ({type(exc).__name__})")
    if isinstance(exc, _UNREACHABLE):
        return ChannelUnreachable(f"cannot reach {service} at {endpoint}: {type(exc).__name__}")
    if isinstance(exc, ParamValidationError):  # a request botocore refuses to send, such as a bad bucket name
        return ChannelError(f"{service} {what}: {exc}")
    if isinstance(exc, NoCredentialsError):
        return ChannelUnavailable(f"no AWS credentials to call {service} at {endpoint}")
    if isinstance(exc, BotoCoreError | ConnectionError):
        return ChannelUnreachable(f"cannot reach {service} at {endpoint}: {exc}")
    return ChannelError(f"{service} {what} failed: {exc}")
