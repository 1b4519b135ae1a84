"""IaaS clusters on EC2: launch one for a job from ``infra/ec2/cluster.yaml``, terminate it.

``launch`` uploads the job record, the package wheel and the bootstrap script to the data
bucket, creates the stack (one head node plus an Auto Scaling group of W-1 nodes that
join its torchrun rendezvous) and records the cluster under ``~/.lambdaml/clusters``.
The head's rank 0 writes the result record, billed as the cluster's instances.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lambdaml import aws, keys, settings
from lambdaml.config import JobSpec, StorageSpec
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.runtime.start import begin
from lambdaml.storage import open_storage

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "ec2" / "cluster.yaml"
BOOTSTRAP = ROOT / "infra" / "ec2" / "bootstrap.sh"
DEFAULT_IMAGE_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
STACK_TIMEOUT_S = 900.0


@dataclass
class Cluster:
    """What ``terminate`` needs to find a cluster again."""

    name: str
    job_id: str
    region: str
    bucket: str
    endpoint_url: str | None
    instance_type: str
    workers: int


def clusters_dir() -> Path:
    return settings.home() / "clusters"


def _record_path(name: str) -> Path:
    return clusters_dir() / f"{keys.check_name(name, 'cluster name')}.json"


def load_cluster(name: str) -> Cluster:
    path = _record_path(name)
    if not path.exists():
        raise ConfigError(f"no cluster named {name!r} (launched clusters are recorded in {clusters_dir()})")
    return Cluster(**json.loads(path.read_text()))


def build_wheel(out_dir: Path) -> Path:
    """The package as a wheel, built from this source tree (nodes install it with pip)."""
    if not (ROOT / "pyproject.toml").exists():
        raise ConfigError("no source tree to build the package from; pass --package WHEEL")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*command, "-w", str(out_dir), str(ROOT)], capture_output=True, text=True, timeout=300)
    wheels = sorted(out_dir.glob("lambdaml-*.whl"))
    if done.returncode != 0 or not wheels:
        raise LambdaMLError(f"could not build the lambdaml wheel: {(done.stderr or done.stdout).strip()[-300:]}")
    return wheels[-1]


def _network(ec2: Any, vpc_id: str | None, subnet_id: str | None) -> tuple[str, str]:
    """The given VPC and subnet, or the account's default VPC and its first subnet."""
    if subnet_id and vpc_id:
        return vpc_id, subnet_id
    if not vpc_id:
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
        if not vpcs:
            raise ConfigError("this account has no default VPC; pass --vpc-id and --subnet-id")
        vpc_id = vpcs[0]["VpcId"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    if not subnets:
        raise ConfigError(f"VPC {vpc_id} has no subnet; pass --subnet-id")
    return vpc_id, subnet_id or sorted(s["SubnetId"] for s in subnets)[0]


def launch(
    job: JobSpec,
    *,
    name: str,
    job_id: str | None = None,
    image_id: str | None = None,
    vpc_id: str | None = None,
    subnet_id: str | None = None,
    package: Path | None = None,
    endpoint_url: str | None = None,
) -> tuple[Cluster, dict[str, str]]:
    """Create the cluster's stack for ``job``; returns the cluster and the stack's outputs."""
    if job.sync.protocol != "bsp":
        raise ConfigError(f"IaaS clusters run protocol 'bsp' only (gloo collectives), not {job.sync.protocol!r}")
    keys.check_name(name, "cluster name")
    if _record_path(name).exists():
        raise ConfigError(f"a cluster named {name!r} exists; terminate it first or pick another --name")
    region = job.storage.region
    store, _, attempt = begin(job, job_id, check_channel=False)  # claims the job id
    job_id = attempt.job_id

    def client(service: str) -> Any:
        return aws.client(service, endpoint_url=endpoint_url, region=region)

    with tempfile.TemporaryDirectory() as tmp:
        wheel = package or build_wheel(Path(tmp))
        if not wheel.is_file():
            raise ConfigError(f"--package {wheel}: no such file")
        package_key = keys.iaas_file(job_id, wheel.name)
        store.put(package_key, wheel.read_bytes())
    store.put(keys.iaas_file(job_id, "bootstrap.sh"), BOOTSTRAP.read_bytes())

    image_id = image_id or client("ssm").get_parameter(Name=DEFAULT_IMAGE_PARAMETER)["Parameter"]["Value"]
    vpc_id, subnet_id = _network(client("ec2"), vpc_id, subnet_id)
    parameters = {
        "InstanceType": job.iaas.instance_type,
        "InstanceCount": str(job.workers),
        "WorkerCount": str(job.workers - 1),
        "ImageId": image_id,
        "VpcId": vpc_id,
        "SubnetId": subnet_id,
        "DataBucket": job.storage.bucket,
        "JobId": job_id,
        "PackageKey": package_key,
    }
    cloudformation = client("cloudformation")
    cloudformation.create_stack(
        StackName=name,
        TemplateBody=TEMPLATE.read_text(),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
        Tags=[{"Key": "lambdaml:job", "Value": job_id}],
    )
    cluster = Cluster(name, job_id, region, job.storage.bucket, endpoint_url, job.iaas.instance_type, job.workers)
    _record_path(name).parent.mkdir(parents=True, exist_ok=True)
    _record_path(name).write_text(json.dumps(asdict(cluster), indent=1))
    outputs = aws.wait_for_stack(cloudformation, name, timeout_s=STACK_TIMEOUT_S)
    log.info("cluster %s is up for job %s: %s", name, job_id, outputs)
    return cluster, outputs


def terminate(name: str) -> Cluster:
    """Delete the cluster's stack (its instances, group, role) and what launch uploaded."""
    cluster = load_cluster(name)
    cloudformation = aws.client("cloudformation", endpoint_url=cluster.endpoint_url, region=cluster.region)
    cloudformation.delete_stack(StackName=name)
    aws.wait_for_stack(cloudformation, name, deleted=True, timeout_s=STACK_TIMEOUT_S)
    store = open_storage(StorageSpec(bucket=cluster.bucket, endpoint_url=cluster.endpoint_url, region=cluster.region))
    store.clear(keys.iaas_prefix(cluster.job_id))
    _record_path(name).unlink()
    return cluster
