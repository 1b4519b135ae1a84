"""JobSpec and its parts, loaded from YAML or JSON and validated on load.

Every part forbids unknown keys, so a typo is an error naming the field rather than a
silently ignored setting. Plug-in names and what each plug-in can do are checked against
the catalogue (``lambdaml.catalogue``) here, without importing any plug-in, so a job with an
unknown algorithm fails before any worker starts, and a torch job validates without torch.
"""

from lambdaml.config.algorithm import AlgorithmSpec, CompressionSpec
from lambdaml.config.channel import AuthSpec, ChannelKind, ChannelSpec
from lambdaml.config.job import (
    IaaSSpec,
    JobSpec,
    ModelSpec,
    RuntimeSpec,
    StorageSpec,
    SyncSpec,
    TrackingSpec,
    load_job,
    parse_job,
)
from lambdaml.config.job_file import read_job_file
from lambdaml.config.urls import check_bucket_name, check_endpoint_url, check_tracking_uri

__all__ = [
    "AlgorithmSpec",
    "AuthSpec",
    "ChannelKind",
    "ChannelSpec",
    "CompressionSpec",
    "IaaSSpec",
    "JobSpec",
    "ModelSpec",
    "RuntimeSpec",
    "StorageSpec",
    "SyncSpec",
    "TrackingSpec",
    "check_bucket_name",
    "check_endpoint_url",
    "check_tracking_uri",
    "load_job",
    "parse_job",
    "read_job_file",
]
