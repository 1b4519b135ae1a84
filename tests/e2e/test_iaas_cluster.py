"""`lambdaml iaas launch/terminate` against moto: the EC2 cluster template, end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml import aws, keys
from lambdaml.channels import Channel
from lambdaml.cli import main
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.runtime import cluster
from tests.helpers import Services

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def job_file(tmp_path: Path, data_store: tuple[StorageSpec, Channel], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path / "home"))
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(300, seed=0)
    shards.prepare(store, "cluster-data", X, y, shards=3, test_fraction=0.0, seed=0)
    path = tmp_path / "job.yaml"
    job = {"name": "cluster", "workers": 2, "dataset": "cluster-data", "storage": spec.model_dump()}
    path.write_text(yaml.safe_dump(job))
    return path


def instances_of(ec2: Any, job_id: str, state: str) -> list[dict[str, Any]]:
    filters = [{"Name": "tag:lambdaml:job", "Values": [job_id]}, {"Name": "instance-state-name", "Values": [state]}]
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def test_launch_creates_a_members_only_cluster_and_terminate_removes_it(
    job_file: Path, services: Services, data_store: tuple[StorageSpec, Channel], capsys: pytest.CaptureFixture[str]
) -> None:
    store = data_store[1]
    args = ["iaas", "launch", str(job_file), "--name", "c1", "--workers", "3", "--instance-type", "m5.xlarge"]
    assert main([*args, "--job-id", "cluster-job-1"]) == 0
    assert "lambdaml iaas terminate c1" in capsys.readouterr().out

    ec2 = aws.client("ec2", endpoint_url=services.moto_url)
    cloudformation = aws.client("cloudformation", endpoint_url=services.moto_url)
    running = instances_of(ec2, "cluster-job-1", "running")
    assert len(running) == 3 and {i["InstanceType"] for i in running} == {"m5.xlarge"}
    outputs = {
        o["OutputKey"]: o["OutputValue"] for o in cloudformation.describe_stacks(StackName="c1")["Stacks"][0]["Outputs"]
    }
    assert outputs["HeadInstanceId"] in {i["InstanceId"] for i in running}

    # The security group admits its own members and nobody else.
    group_id = outputs["SecurityGroupId"]
    group = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    assert group["IpPermissions"], "members must reach each other"
    for rule in group["IpPermissions"]:
        assert rule.get("IpRanges", []) == [] and rule.get("Ipv6Ranges", []) == []
        assert [pair["GroupId"] for pair in rule["UserIdGroupPairs"]] == [group_id]
    # Every node is in the group (moto drops a CloudFormation-made instance's groups, so the
    # head is checked in the template instead).
    workers = [i for i in running if i["InstanceId"] != outputs["HeadInstanceId"]]
    assert all([g["GroupId"] for g in i["SecurityGroups"]] == [group_id] for i in workers)
    assert "SecurityGroupIds: [!Ref ClusterSecurityGroup]" in cluster.TEMPLATE.read_text().split("HeadNode:")[1]

    # What the nodes fetch at boot is in the bucket: the job, the wheel, the bootstrap script.
    uploaded = store.list(keys.iaas_prefix("cluster-job-1"))
    assert keys.iaas_file("cluster-job-1", "bootstrap.sh") in uploaded
    assert any(k.endswith(".whl") for k in uploaded)
    assert json.loads(store.get(keys.job_spec("cluster-job-1")))["workers"] == 3

    # A second cluster under the same name is refused in one line.
    assert main([*args, "--job-id", "cluster-job-2"]) == 1
    assert "exists" in capsys.readouterr().err

    assert main(["iaas", "terminate", "c1"]) == 0
    assert instances_of(ec2, "cluster-job-1", "running") == []
    assert store.list(keys.iaas_prefix("cluster-job-1")) == []
    stacks = cloudformation.list_stacks(StackStatusFilter=["CREATE_COMPLETE"])["StackSummaries"]
    assert "c1" not in {s["StackName"] for s in stacks}
    assert main(["iaas", "terminate", "c1"]) == 1
    assert "no cluster named 'c1'" in capsys.readouterr().err
