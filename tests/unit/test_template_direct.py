"""template.yaml's DirectChannel setting: what its condition wires, and what it must not.

The template is read with the local stack's loader for CloudFormation's short tags, and its
conditions evaluated by the local stack's evaluator (``lambdaml.local.stack._Template``), as
``lambdaml local up`` evaluates them. The reflector the user data installs on the instance is
run here and spoken to with the package's own client, so the two cannot drift apart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml import settings
from lambdaml.comm.direct.reflector import observed_address
from lambdaml.errors import ConfigError
from lambdaml.local import services, stack
from lambdaml.platforms.aws_lambda.outputs import REFLECTOR_ENDPOINT, StackOutputs

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
DIRECT = {
    "DirectChannel": "true",
    "ReflectorVpcId": "vpc-0123456789abcdef0",
    "ReflectorSubnetId": "subnet-0123456789abcdef0",
}
CACHE = {"ChannelCache": "Redis", "VpcId": "vpc-0123456789abcdef1", "SubnetIds": "subnet-0123456789abcdef1"}
FUNCTIONS = ("CoordinatorFunction", "WorkerFunction", "TorchWorkerFunction")
ENDPOINT = {"Sub": "${ReflectorAddress}:${ReflectorPort}"}


@pytest.fixture(scope="module")
def sam() -> dict[str, Any]:
    loaded = yaml.load(TEMPLATE.read_text(), Loader=stack._CfnLoader)  # a SafeLoader
    assert isinstance(loaded, dict)
    return loaded


def values(sam: dict[str, Any], parameters: dict[str, str]) -> stack._Template:
    return stack._Template(sam, parameters, {})


def direct_resources(sam: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in sam["Resources"].items() if name.startswith("Reflector")}


def test_direct_is_off_unless_asked_for_with_its_subnet(sam: dict[str, Any]) -> None:
    assert sam["Parameters"]["DirectChannel"]["Default"] == "false"
    assert sam["Parameters"]["DirectChannel"]["AllowedValues"] == ["true", "false"]
    assert not values(sam, {}).condition("DirectOn")
    assert values(sam, DIRECT).condition("DirectOn")
    assert not values(sam, {**DIRECT, "ReflectorSubnetId": ""}).condition("DirectOn")
    # ... which the rule refuses at deploy time rather than leaving the service out silently
    rule = sam["Rules"]["DirectNeedsAPublicSubnet"]
    assert rule["RuleCondition"] == {"Equals": [{"Ref": "DirectChannel"}, "true"]}
    assert "ReflectorSubnetId" in str(rule["Assertions"]) and "ReflectorVpcId" in str(rule["Assertions"])


def test_every_direct_resource_and_output_exists_only_with_direct(sam: dict[str, Any]) -> None:
    resources = direct_resources(sam)
    types = {res["Type"] for res in resources.values()}
    assert types == {"AWS::EC2::SecurityGroup", "AWS::EC2::LaunchTemplate", "AWS::EC2::Instance", "AWS::EC2::EIP"}
    assert {res.get("Condition") for res in resources.values()} == {"DirectOn"}
    # Nothing else in the template is conditional on direct but the functions' network placement.
    others = [n for n, r in sam["Resources"].items() if r.get("Condition") == "DirectOn" and n not in resources]
    assert others == []
    output = sam["Outputs"][REFLECTOR_ENDPOINT]
    assert output["Condition"] == "DirectOn" and output["Value"] == ENDPOINT


def test_the_functions_learn_the_reflector_only_with_direct(sam: dict[str, Any]) -> None:
    variables = sam["Globals"]["Function"]["Environment"]["Variables"]
    assert variables[settings.ENV_REFLECTOR] == {"If": ["DirectOn", ENDPOINT, ""]}
    assert values(sam, DIRECT).resolve(variables[settings.ENV_REFLECTOR]) == ENDPOINT
    assert values(sam, {}).resolve(variables[settings.ENV_REFLECTOR]) == ""
    # The local stack's functions: "" from the template (its reflector is set by the service instead).
    outputs = {"CoordinatorFunctionName": "c-fn", "WorkerFunctionName": "w-fn"}
    for config in stack.function_configs(TEMPLATE, outputs, {}):
        assert config["environment"][settings.ENV_REFLECTOR] == ""


def test_direct_keeps_the_functions_outside_any_vpc(sam: dict[str, Any]) -> None:
    with_cache = values(sam, CACHE)
    assert with_cache.condition("CacheOn")
    for name in FUNCTIONS:
        assert with_cache.resolve(sam["Resources"][name]["Properties"]["VpcConfig"]) is not None, name
    # Direct and a cache together: the functions leave the VPC (and the rule refuses the pair).
    both = values(sam, {**CACHE, **DIRECT})
    assert not both.condition("CacheOn")
    for name in FUNCTIONS:
        assert both.resolve(sam["Resources"][name]["Properties"]["VpcConfig"]) is None, name
    rule = sam["Rules"]["DirectNeedsNoCache"]
    assert rule["RuleCondition"] == {"Equals": [{"Ref": "DirectChannel"}, "true"]}
    assert rule["Assertions"][0]["Assert"] == {"Equals": [{"Ref": "ChannelCache"}, "None"]}


def test_direct_adds_no_iam_rights(sam: dict[str, Any]) -> None:
    """No role, profile or policy comes with direct: not for the functions, not for the instance."""
    iam = {name: res for name, res in sam["Resources"].items() if res["Type"].startswith("AWS::IAM::")}
    assert not [name for name, res in iam.items() if res.get("Condition") == "DirectOn"]
    assert "Reflector" not in str(iam) and "DirectOn" not in str(iam)
    instance = sam["Resources"]["ReflectorInstance"]["Properties"]
    template_data = sam["Resources"]["ReflectorLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    for props in (instance, template_data):
        assert "IamInstanceProfile" not in props and "KeyName" not in props  # no role, no SSH key


def test_the_instance_is_the_smallest_graviton_on_amazon_linux_2023(sam: dict[str, Any]) -> None:
    resources = sam["Resources"]
    instance = resources["ReflectorInstance"]["Properties"]
    assert instance["InstanceType"] == "t4g.nano"
    assert instance["ImageId"] == "{{resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64}}"
    assert instance["SubnetId"] == {"Ref": "ReflectorSubnetId"}
    assert instance["SecurityGroupIds"] == [{"GetAtt": "ReflectorSecurityGroup.GroupId"}]
    data = resources["ReflectorLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"  # IMDSv2 only
    assert all(mapping["Ebs"]["Encrypted"] is True for mapping in data["BlockDeviceMappings"])
    address = resources["ReflectorAddress"]["Properties"]
    assert address["InstanceId"] == {"Ref": "ReflectorInstance"}


def test_the_security_group_admits_only_the_reflector_port(sam: dict[str, Any]) -> None:
    group = sam["Resources"]["ReflectorSecurityGroup"]["Properties"]
    (ingress,) = group["SecurityGroupIngress"]
    assert ingress["IpProtocol"] == "tcp"
    assert ingress["FromPort"] == ingress["ToPort"] == {"Ref": "ReflectorPort"}
    (egress,) = group["SecurityGroupEgress"]  # replaces the default allow-all: it opens no connections
    assert egress["CidrIp"] == "127.0.0.1/32" and egress["IpProtocol"] == "icmp"
    assert group["VpcId"] == {"Ref": "ReflectorVpcId"}
    standalone = [
        name
        for name, res in sam["Resources"].items()
        if res["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
        and "ReflectorSecurityGroup" in str(res["Properties"])
    ]
    assert standalone == []


def user_data(sam: dict[str, Any]) -> str:
    script = sam["Resources"]["ReflectorInstance"]["Properties"]["UserData"]["Fn::Base64"]["Sub"]
    assert isinstance(script, str)
    return script


def test_the_user_data_runs_the_reflector_on_its_port_as_no_one(sam: dict[str, Any]) -> None:
    script = user_data(sam)
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", script, re.M)
    assert exec_start == "/usr/bin/python3 /opt/lambdaml/reflector.py --host 0.0.0.0 --port ${ReflectorPort}"
    assert "DynamicUser=yes" in script and "NoNewPrivileges=yes" in script
    # Fn::Sub substitutes ${Name}: the only ones are the port's (the Python holds none).
    assert set(re.findall(r"\$\{([^}!]+)\}", script)) == {"ReflectorPort"}


def test_the_user_data_reflector_answers_as_the_package_client_expects(sam: dict[str, Any], tmp_path: Path) -> None:
    """The instance's reflector, run here: the package's client reads from it the address it connected from."""
    match = re.search(r"<<'PY'\n(.*?)\nPY\n", user_data(sam), re.S)
    assert match is not None
    (tmp_path / "reflector.py").write_text(match.group(1))
    port = services.free_port()
    argv = [sys.executable, str(tmp_path / "reflector.py"), "--host", "127.0.0.1", "--port", str(port)]

    def ready() -> bool:
        return services._answers(port, b"", b"LMLR1 127.0.0.1 ")

    with services.running(services._start("user-data-reflector", argv, port, ready, tmp_path / "log")):
        local = ("127.0.0.1", services.free_port())
        assert observed_address(("127.0.0.1", port), local, timeout_s=5.0) == local


def test_a_stack_fills_a_direct_channels_reflector_from_its_output() -> None:
    deployed = StackOutputs("prod", {REFLECTOR_ENDPOINT: "203.0.113.7:7000", "DataBucketName": "d"})
    assert deployed.channel_fields("direct") == {"reflector": "203.0.113.7:7000"}
    assert deployed.environment().output(REFLECTOR_ENDPOINT) == "203.0.113.7:7000"  # what fits the stack
    without = StackOutputs("prod", {"DataBucketName": "d"})
    with pytest.raises(ConfigError, match=r"^stack 'prod' has no direct channel \(no output 'ReflectorEndpoint'\)"):
        without.channel_fields("direct")


def test_a_function_reads_the_reflector_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.ENV_REFLECTOR, "203.0.113.7:7000")
    assert settings.stack_environment().output(REFLECTOR_ENDPOINT) == "203.0.113.7:7000"
    monkeypatch.setenv(settings.ENV_REFLECTOR, "")  # the template's value without direct
    assert settings.stack_environment().reflector is None
