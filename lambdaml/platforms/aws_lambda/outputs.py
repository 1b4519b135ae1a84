"""A deployed stack's CloudFormation outputs, and the endpoints that reach it, read as the stack's
resources: what its functions know of it, its data bucket, the channel fields it provides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lambdaml import aws, catalogue, settings
from lambdaml.config import StorageSpec
from lambdaml.errors import ConfigError

#: The outputs ``template.yaml`` gives the functions and the client (others name channels' resources).
COORDINATOR, WORKER, TORCH_WORKER = "CoordinatorFunctionName", "WorkerFunctionName", "TorchWorkerFunctionName"
DATA_BUCKET, JOBS_TABLE, CACHE_ENDPOINT, CACHE_KIND = "DataBucketName", "JobsTableName", "CacheEndpoint", "CacheKind"
CACHE_AUTH_SECRET = "CacheAuthSecretArn"
REFLECTOR_ENDPOINT = "ReflectorEndpoint"  # host:port of the direct channel's rendezvous service (DirectChannel)


@dataclass
class StackOutputs:
    """A stack's outputs and the endpoints to reach it: none for AWS itself, loopback ones for a local stack."""

    name: str
    outputs: dict[str, str]
    region: str = "us-east-1"
    endpoints: dict[str, str] = field(default_factory=dict)  # service -> URL, for local stacks

    def output(self, name: str) -> str:
        try:
            return self.outputs[name]
        except KeyError:
            raise ConfigError(f"stack {self.name!r} has no output {name!r}; is it a LambdaML stack?") from None

    def client(self, service: str, **kwargs: Any) -> Any:
        """A boto3 client of one of the stack's services, bounded as ``aws.client`` bounds them."""
        return aws.client(service, endpoint_url=self.endpoints.get(service), region=self.region, **kwargs)

    def worker_functions(self) -> list[str]:
        """The stack's worker functions: the zip worker, and the torch image's where it has one."""
        return [self.outputs[output] for output in (WORKER, TORCH_WORKER) if output in self.outputs]

    def environment(self) -> settings.StackEnvironment:
        """What the stack's functions know of it (on AWS, their environment), read from its outputs."""
        host, _, port = self.outputs.get(CACHE_ENDPOINT, "").partition(":")
        cache_kind = self.outputs.get(CACHE_KIND)
        cache = catalogue.CHANNELS.get(cache_kind or "")  # the kind's description says how AWS serves it
        return settings.StackEnvironment(
            data_bucket=self.outputs.get(DATA_BUCKET),
            comm_bucket=self.outputs.get("CommBucketName"),
            channel_table=self.outputs.get("ChannelTableName"),
            cache_kind=cache_kind,
            cache_host=host or None,
            cache_port=int(port) if port.isdigit() else None,
            cache_tls=bool(cache and cache.stack_cache_secured) and not self.endpoints,  # on AWS, TLS only
            worker_function=self.outputs.get(WORKER),
            torch_worker_function=self.outputs.get(TORCH_WORKER),
            jobs_table=self.outputs.get(JOBS_TABLE),
            reflector=self.outputs.get(REFLECTOR_ENDPOINT),
        )

    def data_storage(self) -> StorageSpec:
        return StorageSpec(bucket=self.output(DATA_BUCKET), endpoint_url=self.endpoints.get("s3"), region=self.region)

    def channel_fields(self, kind: str) -> dict[str, object]:
        """The channel fields the stack provides for the kind, as its description says: the resources its
        outputs name; an AWS service's endpoint and region; its cache's address, where the cache serves
        that kind, with TLS and the AUTH secret where the cache on AWS has them. Empty: it provides none."""
        info, environment = catalogue.channel(kind), self.environment()
        for provided in info.stack_fields:  # a stack deployed without the kind's resources (DirectChannel off, say)
            if provided.output not in self.outputs:
                raise ConfigError(
                    f"stack {self.name!r} has no {info.called} channel (no output {provided.output!r}); "
                    "deploy it with one (see template.yaml's parameters)"
                )
        fields: dict[str, object] = {f.field: self.output(f.output) for f in info.stack_fields}
        if info.aws_service is not None:
            fields.update(endpoint_url=self.endpoints.get(info.aws_service), region=self.region)
        if info.stack_cache and kind == environment.cache_kind:
            fields.update(host=environment.cache_host, port=environment.cache_port)
            if environment.cache_tls:  # the template's cache on AWS has transit encryption on ...
                fields["tls"] = True
                # ... and an AUTH token in Secrets Manager, which the functions' roles may read
                if CACHE_AUTH_SECRET in self.outputs:
                    fields["auth"] = {"secret_id": self.outputs[CACHE_AUTH_SECRET]}
        return fields
