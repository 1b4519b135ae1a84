"""template.yaml: the security properties of the SAM application, and its translation.

The template is read as YAML with CloudFormation's short tags (!Ref, !GetAtt, !If ...) turned
into their long forms. The translation test runs aws-sam-translator from .venv-sam in a
subprocess (it pins boto3/pydantic versions that must stay out of the main venv) and creates
the result on moto's CloudFormation, as `lambdaml local up` will. Nothing here calls AWS.

S3 access by prefix is checked with a tiny policy evaluator (``allowed``): Allow and Deny
statements, Action and Resource wildcards, and the few condition operators the templates use.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
TRANSLATE = ROOT / "infra" / "sam" / "translate.py"

OUTPUTS = (
    "DataBucketName",
    "CommBucketName",
    "JobsTableName",
    "ChannelTableName",
    "CoordinatorFunctionName",
    "WorkerFunctionName",
    "CacheEndpoint",
    "Region",
)
# The one statement allowed to use Resource "*": the read-only EC2 Describe calls a function in a
# VPC needs, which accept no narrower resource; present only when a cache is on.
VPC_EXCEPTION_SID = "LambdaVpcDescribeResourceStarException"
VPC_EXCEPTION_ACTIONS = {"ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"}
# The network-interface actions that change something: scoped to the account, region and the stack's VPC.
VPC_ENI_ACTIONS = {
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
}
ARN_HERE = "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}"
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
CLUSTER_TEMPLATE = ROOT / "infra" / "ec2" / "cluster.yaml"
FUNCTION_ROLES = ("CoordinatorRole", "WorkerRole")
# What the evaluator substitutes for the templates' references (a stack's values, made up).
DATA_ARN = "arn:aws:s3:::lambdaml-data"
COMM_ARN = "arn:aws:s3:::lambdaml-comm"
ACCOUNT = "123456789012"
NAMES = {
    "DataBucket.Arn": DATA_ARN,
    "CommBucket.Arn": COMM_ARN,
    "CoordinatorRole.Arn": f"arn:aws:iam::{ACCOUNT}:role/lambdaml-CoordinatorRole-1",
    "WorkerRole.Arn": f"arn:aws:iam::{ACCOUNT}:role/lambdaml-WorkerRole-1",
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": ACCOUNT,
}
# Keys of the data bucket's layout (lambdaml/keys.py), versioned datasets included.
DATASET_KEYS = (
    "datasets/d/current.json",
    "datasets/d/v/1/manifest.json",
    "datasets/d/v/1/shards/00000",
    "datasets/d/v/1/test",
    "datasets/d/manifest.json",
    "datasets/d/shards/00000",
)
JOB_KEYS = (
    "jobs/x/spec.json",
    "jobs/x/status.json",
    "jobs/x/cancel",
    "jobs/x/a0001/heartbeats/p00000.json",
    "jobs/x/a0001/checkpoints/p00000.s0",
    "jobs/x/reports/p00000.json",
    "jobs/x/result.json",
    "jobs/x/model",
)
IAAS_KEYS = ("iaas/x/bootstrap.sh", "iaas/x/lambdaml-0.1.0-py3-none-any.whl")
WRITES = ("s3:PutObject", "s3:DeleteObject")


class CfnLoader(yaml.SafeLoader):
    """SafeLoader plus CloudFormation short tags, turned into their long forms."""


def _cfn_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        assert isinstance(node, yaml.MappingNode)
        value = loader.construct_mapping(node, deep=True)
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    name = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
    return {name: value}


CfnLoader.add_multi_constructor("!", _cfn_tag)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)  # CfnLoader is a SafeLoader
    assert isinstance(loaded, dict)
    return loaded


def resources_of(template: dict[str, Any], *types: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in template["Resources"].items() if res["Type"] in types}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def getatt_arn(name: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [name, "Arn"]}


# ------------------------------------------------------------------------- IAM walking


def policy_documents(template: dict[str, Any]) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """(resource, its condition, document) for every policy document in the template."""
    for name, res in template["Resources"].items():
        props = res.get("Properties") or {}
        condition = res.get("Condition")
        kind = res["Type"]
        if kind == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                yield from _documents_in(name, condition, policy)
        elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy"):
            yield name, condition, props["PolicyDocument"]
        elif kind == "AWS::Serverless::Function":
            for policy in as_list(props.get("Policies", [])):
                if isinstance(policy, dict) and "Statement" in policy:
                    yield name, condition, policy


def _documents_in(name: str, condition: str | None, policy: Any) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """Policies inside a role, looking through Fn::If (whose condition then applies)."""
    if isinstance(policy, dict) and "Fn::If" in policy:
        cond, when_true, when_false = policy["Fn::If"]
        yield from _documents_in(name, cond, when_true)
        yield from _documents_in(name, condition, when_false)
    elif isinstance(policy, dict) and "PolicyDocument" in policy:
        yield name, condition, policy["PolicyDocument"]


def statements(template: dict[str, Any]) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    for name, condition, document in policy_documents(template):
        for statement in as_list(document["Statement"]):
            yield name, condition, statement


def plain_values(value: Any) -> list[Any]:
    """Every alternative a (possibly Fn::If-wrapped) value or list can take, flattened."""
    out: list[Any] = []
    for item in as_list(value):
        if isinstance(item, dict) and "Fn::If" in item:
            _, when_true, when_false = item["Fn::If"]
            out += plain_values(when_true) + plain_values(when_false)
        elif item != {"Ref": "AWS::NoValue"}:
            out.append(item)
    return out


# ------------------------------------------------------------------------- storage


@pytest.mark.parametrize("bucket", ["DataBucket", "CommBucket"])
def test_buckets_encrypted_private_and_unversioned(template: dict[str, Any], bucket: str) -> None:
    props = template["Resources"][bucket]["Properties"]
    rules = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rules and all(
        r["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms", "aws:kms:dsse") for r in rules
    )
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props.get("VersioningConfiguration", {}).get("Status") != "Enabled"


def test_buckets_lifecycle_and_retention(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    assert resources["DataBucket"]["DeletionPolicy"] == "Retain"
    assert resources["DataBucket"]["UpdateReplacePolicy"] == "Retain"
    rules = resources["CommBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert any(r["Status"] == "Enabled" and r.get("ExpirationInDays") == 1 and "Prefix" not in r for r in rules)


@pytest.mark.parametrize("bucket", ["DataBucket", "CommBucket"])
def test_buckets_refuse_plain_http(template: dict[str, Any], bucket: str) -> None:
    policies = resources_of(template, "AWS::S3::BucketPolicy").values()
    (policy,) = [r for r in policies if r["Properties"]["Bucket"] == {"Ref": bucket}]
    document = policy["Properties"]["PolicyDocument"]
    (statement,) = [st for st in document["Statement"] if st.get("Sid") == "DenyInsecureTransport"]
    assert statement["Effect"] == "Deny" and statement["Principal"] == "*" and statement["Action"] == "s3:*"
    assert statement["Resource"] == [getatt_arn(bucket), {"Fn::Sub": f"${{{bucket}.Arn}}/*"}]
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_jobs_table(template: dict[str, Any]) -> None:
    props = template["Resources"]["JobsTable"]["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [
        {"AttributeName": "job_id", "KeyType": "HASH"},
        {"AttributeName": "item", "KeyType": "RANGE"},
    ]
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == [
        {"AttributeName": "item", "AttributeType": "S"},
        {"AttributeName": "job_id", "AttributeType": "S"},
    ]
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


def test_channel_table_matches_the_dynamodb_channel(template: dict[str, Any]) -> None:
    # lambdaml.channels.dynamodb stores {"k": S, "v": B, "n": N} keyed by k alone.
    props = template["Resources"]["ChannelTable"]["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "k", "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": "k", "AttributeType": "S"}]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"]["SSEEnabled"] is True


def test_every_table_and_queue_encrypted(template: dict[str, Any]) -> None:
    for name, res in resources_of(template, "AWS::DynamoDB::Table").items():
        assert res["Properties"]["SSESpecification"]["SSEEnabled"] is True, name
    for name, res in resources_of(template, "AWS::SQS::Queue").items():
        props = res["Properties"]
        assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props, name


# ------------------------------------------------------------------------- IAM


def test_iam_found_every_role_and_policy(template: dict[str, Any]) -> None:
    names = {name for name, _, _ in policy_documents(template)}
    expected = {"CoordinatorRole", "WorkerRole", "CoordinatorInvokePolicy", "WorkerInvokePolicy"}
    assert expected | {"VpcNetworkInterfacesPolicy", "DataBucketPolicy", "CommBucketPolicy"} <= names


def test_no_wildcard_actions(template: dict[str, Any]) -> None:
    for name, _, statement in statements(template):
        assert "NotAction" not in statement, name
        for action in plain_values(statement["Action"]):
            assert isinstance(action, str), (name, action)
            service, _, verb = action.partition(":")
            assert action != "*" and "*" not in service and verb, (name, action)
            if statement["Effect"] == "Allow":  # grants name every action; only a Deny may say "s3:*"
                assert "*" not in verb, (name, action)


def test_no_resource_star_except_the_vpc_exception(template: dict[str, Any]) -> None:
    exceptions = []
    for name, condition, statement in statements(template):
        if statement["Effect"] != "Allow":
            continue
        assert "NotResource" not in statement, name
        resources = plain_values(statement["Resource"])
        assert resources, name
        if "*" not in resources:
            continue
        # Only the documented exception, only on "*", only EC2 ENI actions, only with a cache.
        assert statement.get("Sid") == VPC_EXCEPTION_SID, (name, statement)
        assert resources == ["*"]
        assert set(plain_values(statement["Action"])) <= VPC_EXCEPTION_ACTIONS
        assert condition == "CacheOn", name
        exceptions.append(name)
    assert exceptions == ["VpcNetworkInterfacesPolicy"]
    conditions = template["Conditions"]["CacheOn"]["Fn::And"]
    assert {"Fn::Not": [{"Fn::Equals": [{"Ref": "ChannelCache"}, "None"]}]} in conditions


def test_network_interface_changes_only_in_the_stack_vpc(template: dict[str, Any]) -> None:
    (statement,) = [st for _, _, st in statements(template) if set(plain_values(st["Action"])) & VPC_ENI_ACTIONS]
    assert set(plain_values(statement["Action"])) == VPC_ENI_ACTIONS
    assert plain_values(statement["Resource"]) == [
        {"Fn::Sub": f"{ARN_HERE}:{kind}/*"} for kind in ("network-interface", "subnet", "security-group")
    ]
    assert statement["Condition"] == {"ArnEquals": {"ec2:Vpc": {"Fn::Sub": f"{ARN_HERE}:vpc/${{VpcId}}"}}}


def test_redis_auth_token_lives_in_secrets_manager(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    secret = resources["RedisAuthSecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret" and secret["Condition"] == "UseRedis"
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["GenerateStringKey"] == "password" and generated["PasswordLength"] >= 32
    assert "SecretString" not in secret["Properties"]  # generated by AWS, never written in the template
    token = resources["RedisCache"]["Properties"]["AuthToken"]
    assert token == {"Fn::Sub": "{{resolve:secretsmanager:${RedisAuthSecret}:SecretString:password}}"}
    readers = [
        (name, condition, plain_values(st["Resource"]))
        for name, condition, st in statements(template)
        if any(a.startswith("secretsmanager:") for a in plain_values(st["Action"]))
    ]
    assert readers == [("RedisAuthTokenPolicy", "UseRedis", [{"Ref": "RedisAuthSecret"}])]
    roles = resources["RedisAuthTokenPolicy"]["Properties"]["Roles"]
    assert roles == [{"Ref": "CoordinatorRole"}, {"Ref": "WorkerRole"}]
    for _, _, st in statements(template):
        if any(a.startswith("secretsmanager:") for a in plain_values(st["Action"])):
            assert plain_values(st["Action"]) == ["secretsmanager:GetSecretValue"]
    assert template["Outputs"]["CacheAuthSecretArn"] == {"Condition": "UseRedis", "Value": {"Ref": "RedisAuthSecret"}}


def test_every_checkov_skip_has_a_reason_listed_in_security_md(template: dict[str, Any]) -> None:
    security = (ROOT / "SECURITY.md").read_text()
    skipped = 0
    for name, res in template["Resources"].items():
        for skip in res.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert len(skip.get("comment", "")) > 20, (name, skip)
            assert skip["id"] in security, (name, skip["id"])
            skipped += 1
    assert skipped > 0


def test_no_managed_policies_or_generated_roles(template: dict[str, Any]) -> None:
    """Managed policies (AWSLambdaBasicExecutionRole ...) use Resource "*": none are attached.

    Every function names its own role, so SAM generates no role with managed policies.
    """
    for name, res in resources_of(template, "AWS::IAM::Role").items():
        assert "ManagedPolicyArns" not in res["Properties"], name
    for name, res in resources_of(template, *FUNCTION_TYPES).items():
        props = res["Properties"]
        assert "Role" in props and "Policies" not in props, name


def test_invoke_scoped_to_the_stack_functions(template: dict[str, Any]) -> None:
    granted: dict[str, list[Any]] = {}
    for name, _, statement in statements(template):
        if "lambda:InvokeFunction" in plain_values(statement["Action"]):
            assert plain_values(statement["Action"]) == ["lambda:InvokeFunction"], name
            granted[name] = plain_values(statement["Resource"])
    workers = [getatt_arn("WorkerFunction"), getatt_arn("TorchWorkerFunction")]
    # The coordinator starts workers and may invoke nothing else.
    assert granted.pop("CoordinatorInvokePolicy") == workers
    # A worker continues itself, and reports a failure to the coordinator (its destination).
    assert granted.pop("WorkerInvokePolicy") == [*workers, getatt_arn("CoordinatorFunction")]
    assert granted == {}


def test_storage_statements_name_the_stack_resources(template: dict[str, Any]) -> None:
    allowed = {
        "s3": [
            getatt_arn("DataBucket"),
            getatt_arn("CommBucket"),
            {"Fn::Sub": "${DataBucket.Arn}/datasets/*"},
            {"Fn::Sub": "${DataBucket.Arn}/jobs/*"},
            {"Fn::Sub": "${CommBucket.Arn}/*"},
        ],
        "dynamodb": [getatt_arn("JobsTable"), getatt_arn("ChannelTable")],
        "logs": [getatt_arn("CoordinatorLogGroup"), getatt_arn("WorkerLogGroup")],
        "sqs": [getatt_arn("FailedEventsQueue")],
    }
    for name, _, statement in statements(template):
        if statement["Effect"] != "Allow" or name.endswith("BucketPolicy"):
            continue
        services = {a.split(":")[0] for a in plain_values(statement["Action"])}
        for service in services & allowed.keys():
            for resource in plain_values(statement["Resource"]):
                assert resource in allowed[service], (name, service, resource)


# ------------------------------------------------------------------------- S3 by prefix


def resolve(value: Any, names: dict[str, str]) -> str:
    """A Resource or condition value as the ARN or string it stands for: Fn::Sub, Fn::GetAtt and Ref
    through ``names``; a reference missing from ``names`` fails the test rather than match nothing."""

    def named(name: str) -> str:
        assert name in names, f"the evaluator does not know ${{{name}}}"
        return names[name]

    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([^}!]+)\}", lambda m: named(m.group(1)), value["Fn::Sub"])
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        return named(".".join(value["Fn::GetAtt"]))
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return named(value["Ref"])
    raise AssertionError(f"the evaluator cannot resolve {value!r}")


def role_statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """Every statement of a role: its inline policies, and the policies attached to it by Roles."""
    found: list[dict[str, Any]] = []
    for name, _, document in policy_documents(template):
        res = template["Resources"][name]
        roles = (res.get("Properties") or {}).get("Roles", [])
        if name == role or (res["Type"] == "AWS::IAM::Policy" and {"Ref": role} in roles):
            found += as_list(document["Statement"])
    assert found, role
    return found


def s3_statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The role's statements that name an S3 action (or a wildcard that could cover one)."""
    return [
        st
        for st in role_statements(template, role)
        if any(a == "*" or a.lower().startswith("s3:") for a in plain_values(st.get("Action", [])))
    ]


def _grants(patterns: Any, action: str) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), str(p).lower()) for p in plain_values(patterns))


def _condition_holds(condition: dict[str, Any], context: dict[str, str], names: dict[str, str]) -> bool:
    for operator, tests in condition.items():
        for key, expected in tests.items():
            values = [resolve(v, names) for v in plain_values(expected)]
            actual = context.get(key)
            if actual is None:  # a key the request does not carry: the condition is false (no ...IfExists here)
                return False
            if operator in ("StringEquals", "ArnEquals"):
                holds = actual in values
            elif operator in ("StringLike", "ArnLike"):
                holds = any(fnmatch.fnmatchcase(actual, v) for v in values)
            elif operator == "Bool":
                holds = actual.lower() in [v.lower() for v in values]
            else:
                raise AssertionError(f"the evaluator does not know the condition operator {operator}")
            if not holds:
                return False
    return True


def _applies(
    statement: dict[str, Any], action: str, resource: str, context: dict[str, str], names: dict[str, str]
) -> bool:
    assert "NotAction" not in statement and "NotResource" not in statement, statement
    if not _grants(statement["Action"], action):
        return False
    resources = [resolve(r, names) for r in plain_values(statement["Resource"])]
    if not any(fnmatch.fnmatchcase(resource, r) for r in resources):
        return False
    return _condition_holds(statement.get("Condition", {}), context, names)


def allowed(
    statements_: list[dict[str, Any]],
    action: str,
    key: str | None = None,
    *,
    bucket: str = DATA_ARN,
    prefix: str | None = None,
    context: dict[str, str] | None = None,
    names: dict[str, str] = NAMES,
) -> bool:
    """Whether the statements allow ``action`` on the object ``key`` of ``bucket`` (on the bucket
    itself when ``key`` is None; ``prefix`` is a listing's s3:prefix): some Allow applies and no Deny."""
    resource = bucket if key is None else f"{bucket}/{key}"
    request = dict(context or {})
    if prefix is not None:
        request["s3:prefix"] = prefix
    applying = [st for st in statements_ if _applies(st, action, resource, request, names)]
    return any(st["Effect"] == "Allow" for st in applying) and not any(st["Effect"] == "Deny" for st in applying)


def bucket_policy_statements(template: dict[str, Any], bucket: str) -> list[dict[str, Any]]:
    (policy,) = [
        r
        for r in resources_of(template, "AWS::S3::BucketPolicy").values()
        if r["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    found = as_list(policy["Properties"]["PolicyDocument"]["Statement"])
    for statement in found:  # every statement names everyone; conditions pick who
        assert statement["Principal"] == "*", statement
    return found


def test_the_evaluator_catches_a_bucket_wide_grant() -> None:
    """Today's mistake, in one statement: Put/Delete on the whole data bucket."""
    broad = [
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:Put*", "s3:DeleteObject"],
            "Resource": [{"Fn::Sub": "${DataBucket.Arn}/*"}],
        }
    ]
    assert allowed(broad, "s3:PutObject", "datasets/d/v/1/shards/00000")
    assert allowed(broad, "s3:DeleteObject", "datasets/d/current.json")
    assert not allowed(broad, "s3:PutObject", "x", bucket=COMM_ARN)
    assert not allowed(broad, "s3:ListBucket", prefix="jobs/")
    deny = {"Effect": "Deny", "Action": "s3:*", "Resource": {"Fn::Sub": "${DataBucket.Arn}/datasets/*"}}
    assert not allowed([*broad, deny], "s3:PutObject", "datasets/d/current.json")
    assert allowed([*broad, deny], "s3:PutObject", "jobs/x/status.json")
    listing = {
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": getatt_arn("DataBucket"),
        "Condition": {"StringLike": {"s3:prefix": ["jobs/*"]}},
    }
    assert allowed([listing], "s3:ListBucket", prefix="jobs/x/")
    assert not allowed([listing], "s3:ListBucket", prefix="datasets/")
    assert not allowed([listing], "s3:ListBucket")  # no prefix at all: the whole bucket


@pytest.mark.parametrize("role", FUNCTION_ROLES)
def test_functions_cannot_write_or_delete_datasets(template: dict[str, Any], role: str) -> None:
    """No Allow of a write (s3:PutObject, s3:DeleteObject, or a wildcard covering one) on a
    resource that matches a dataset key or the whole data bucket."""
    for statement in s3_statements(template, role):
        if statement["Effect"] != "Allow":
            continue
        if not any(_grants(statement["Action"], action) for action in WRITES):
            continue
        for resource in (resolve(r, NAMES) for r in plain_values(statement["Resource"])):
            assert resource != f"{DATA_ARN}/*", (role, statement)
            for key in (*DATASET_KEYS, *IAAS_KEYS):
                assert not fnmatch.fnmatchcase(f"{DATA_ARN}/{key}", resource), (role, key, statement)


@pytest.mark.parametrize("role", FUNCTION_ROLES)
def test_functions_read_datasets_and_own_the_job_records(template: dict[str, Any], role: str) -> None:
    granted = s3_statements(template, role)
    for key in DATASET_KEYS:
        assert allowed(granted, "s3:GetObject", key), (role, key)
        for action in WRITES:
            assert not allowed(granted, action, key), (role, action, key)
    for key in JOB_KEYS:
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert allowed(granted, action, key), (role, action, key)
    for key in IAAS_KEYS:  # the EC2 baseline's files: no function touches them
        for action in ("s3:GetObject", *WRITES):
            assert not allowed(granted, action, key), (role, action, key)
    for key in ("manifest.json", "other/x", "jobsx/status.json"):  # nothing outside the two prefixes
        for action in ("s3:GetObject", *WRITES):
            assert not allowed(granted, action, key), (role, action, key)
    # The policy evaluator's verdicts the task names.
    assert allowed(granted, "s3:PutObject", "jobs/x/status.json")
    assert not allowed(granted, "s3:PutObject", "datasets/d/v/1/shards/00000")
    assert not allowed(granted, "s3:DeleteObject", "datasets/d/current.json")


@pytest.mark.parametrize("role", FUNCTION_ROLES)
def test_data_bucket_listing_only_by_prefix(template: dict[str, Any], role: str) -> None:
    """ListBucket on the data bucket only with an s3:prefix condition (jobs/*, datasets/*).

    No function lists the data bucket; the grant makes S3 answer a read of a missing key
    (the cancel marker, a report not yet written) with 404 rather than 403.
    """
    granted = s3_statements(template, role)
    for statement in granted:
        if statement["Effect"] != "Allow" or not _grants(statement["Action"], "s3:ListBucket"):
            continue
        if DATA_ARN not in [resolve(r, NAMES) for r in plain_values(statement["Resource"])]:
            continue
        assert plain_values(statement["Resource"]) == [getatt_arn("DataBucket")], statement
        (operator,) = statement["Condition"]
        assert operator in ("StringLike", "StringEquals"), statement
        assert set(statement["Condition"][operator]) == {"s3:prefix"}, statement
        assert set(plain_values(statement["Condition"][operator]["s3:prefix"])) <= {"jobs/*", "datasets/*"}
    for prefix in ("jobs/", "jobs/x/", "jobs/x/a0001/reports/p00000.json", "datasets/d/current.json"):
        assert allowed(granted, "s3:ListBucket", prefix=prefix), (role, prefix)
    for prefix in ("", "iaas/", "iaas/x/", "j", "other/"):
        assert not allowed(granted, "s3:ListBucket", prefix=prefix), (role, prefix)
    assert not allowed(granted, "s3:ListBucket")


@pytest.mark.parametrize("role", FUNCTION_ROLES)
def test_functions_keep_the_whole_comm_bucket(template: dict[str, Any], role: str) -> None:
    """The S3 channel holds only round keys: get, put, delete anywhere, and list it whole."""
    granted = s3_statements(template, role)
    for key in ("comm/x/a0001/r000000001/grad/p00000", "anything"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert allowed(granted, action, key, bucket=COMM_ARN), (role, action, key)
    assert allowed(granted, "s3:ListBucket", bucket=COMM_ARN)  # HeadBucket sends no prefix
    assert allowed(granted, "s3:ListBucket", bucket=COMM_ARN, prefix="comm/x/")


def test_data_bucket_policy_denies_function_writes_to_datasets(template: dict[str, Any]) -> None:
    """Defence in depth: even a role given s3:* on the whole bucket could not write a dataset or an
    EC2 cluster's files, if it is one of the two function roles; the user's own role still can."""
    denies = [st for st in bucket_policy_statements(template, "DataBucket") if st["Effect"] == "Deny"]
    everything = {"Effect": "Allow", "Action": "s3:*", "Resource": [getatt_arn("DataBucket"), f"{DATA_ARN}/*"]}
    tls = {"aws:SecureTransport": "true"}
    for role in FUNCTION_ROLES:
        who = {**tls, "aws:PrincipalArn": NAMES[f"{role}.Arn"]}
        for key in (*DATASET_KEYS, *IAAS_KEYS):
            for action in (*WRITES, "s3:PutObjectTagging", "s3:DeleteObjectVersion"):
                assert not allowed([everything, *denies], action, key, context=who), (role, action, key)
            assert allowed([everything, *denies], "s3:GetObject", key, context=who), (role, key)
        for key in JOB_KEYS:
            for action in WRITES:
                assert allowed([everything, *denies], action, key, context=who), (role, action, key)
    user = {**tls, "aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/Admin"}
    for key in (*DATASET_KEYS, *IAAS_KEYS, *JOB_KEYS):
        for action in WRITES:
            assert allowed([everything, *denies], action, key, context=user), (action, key)
    # ...and nothing at all without TLS, for anyone.
    for key in ("jobs/x/status.json", "datasets/d/current.json"):
        plain = {"aws:SecureTransport": "false", "aws:PrincipalArn": user["aws:PrincipalArn"]}
        assert not allowed([everything, *denies], "s3:GetObject", key, context=plain)


def test_ec2_instance_role_least_privilege() -> None:
    """infra/ec2/cluster.yaml: an instance reads datasets/* and its job's iaas/<job>/* files,
    reads and writes only jobs/<job>/*, deletes nothing, and lists only those prefixes."""
    cluster = yaml.load(CLUSTER_TEMPLATE.read_text(), Loader=CfnLoader)  # CfnLoader is a SafeLoader
    names = {"AWS::Partition": "aws", "DataBucket": "lambdaml-data", "JobId": "x"}
    granted = s3_statements(cluster, "InstanceRole")
    for key in (*DATASET_KEYS, *IAAS_KEYS):
        assert allowed(granted, "s3:GetObject", key, names=names), key
        for action in WRITES:
            assert not allowed(granted, action, key, names=names), (action, key)
    for key in JOB_KEYS:
        assert allowed(granted, "s3:GetObject", key, names=names), key
        assert allowed(granted, "s3:PutObject", key, names=names), key
        assert not allowed(granted, "s3:DeleteObject", key, names=names), key
    for key in ("jobs/other/spec.json", "iaas/other/bootstrap.sh"):  # another job's files
        for action in ("s3:GetObject", *WRITES):
            assert not allowed(granted, action, key, names=names), (action, key)
    for prefix in ("jobs/x/", "jobs/x/reports/p00001.json", "datasets/d/v/1/manifest.json"):
        assert allowed(granted, "s3:ListBucket", prefix=prefix, names=names), prefix
    for prefix in ("", "jobs/", "jobs/other/", "iaas/"):
        assert not allowed(granted, "s3:ListBucket", prefix=prefix, names=names), prefix
    assert not allowed(granted, "s3:ListBucket", names=names)


# ------------------------------------------------------------------------- functions


def test_worker_async_retries_then_coordinator(template: dict[str, Any]) -> None:
    configs = {
        r["Properties"]["FunctionName"]["Ref"]: r
        for r in resources_of(template, "AWS::Lambda::EventInvokeConfig").values()
    }
    worker = configs["WorkerFunction"]["Properties"]
    assert worker["MaximumRetryAttempts"] == 2
    assert worker["DestinationConfig"]["OnFailure"]["Destination"] == getatt_arn("CoordinatorFunction")
    # Three 15-minute attempts plus AWS's retry back-off must fit, or a retry is dropped for age.
    assert 3 * 900 + 180 <= worker["MaximumEventAgeInSeconds"] <= 21600
    assert configs["WorkerFunction"]["DependsOn"] == "WorkerInvokePolicy"
    torch = configs["TorchWorkerFunction"]
    assert torch["Condition"] == "HasTorchWorker"
    assert torch["Properties"]["DestinationConfig"] == worker["DestinationConfig"]
    coordinator = configs["CoordinatorFunction"]["Properties"]
    assert coordinator["MaximumRetryAttempts"] == 2
    assert coordinator["DestinationConfig"]["OnFailure"]["Destination"] == getatt_arn("FailedEventsQueue")


def test_parameters(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    assert (params["WorkerMemoryMB"]["Default"], params["WorkerMemoryMB"]["MinValue"]) == (3008, 128)
    assert params["WorkerMemoryMB"]["MaxValue"] == 10240
    assert params["WorkerTimeoutS"]["Default"] == 900 and params["WorkerTimeoutS"]["MaxValue"] == 900
    assert params["WorkerReservedConcurrency"]["Default"] == -1
    assert params["ChannelCache"]["AllowedValues"] == ["None", "Redis", "Memcached"]
    assert params["ChannelCache"]["Default"] == "None"
    for optional in ("VpcId", "SubnetIds", "TorchImageUri"):
        assert params[optional]["Default"] == "", optional
    assert template["Conditions"]["HasWorkerReservedConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "WorkerReservedConcurrency"}, -1]}]
    }


def test_zip_functions(template: dict[str, Any]) -> None:
    for name, module in (("CoordinatorFunction", "coordinator"), ("WorkerFunction", "worker")):
        props = template["Resources"][name]["Properties"]
        assert props["PackageType"] == "Zip" and props["Runtime"] == "python3.11", name
        assert props["CodeUri"] == "functions/"
        assert props["Handler"] == f"{module}.app.handler"
        assert (ROOT / "functions" / module / "app.py").is_file()
    worker = template["Resources"]["WorkerFunction"]["Properties"]
    assert worker["MemorySize"] == {"Ref": "WorkerMemoryMB"}
    assert worker["Timeout"] == {"Ref": "WorkerTimeoutS"}
    assert worker["ReservedConcurrentExecutions"] == {
        "Fn::If": ["HasWorkerReservedConcurrency", {"Ref": "WorkerReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }


def test_zip_code_directory(template: dict[str, Any]) -> None:
    """`sam build` copies functions/ (the lambdaml symlink included) and installs requirements.txt."""
    link = ROOT / "functions" / "lambdaml"
    assert link.is_symlink() and link.resolve() == (ROOT / "lambdaml").resolve()
    pins = {}
    for line in (ROOT / "functions" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"functions/requirements.txt: {line!r} is not pinned"
            pins[name.lower().replace("_", "-")] = version
    assert {"numpy", "pydantic", "pyyaml", "redis", "pymemcache"} <= pins.keys()
    assert tuple(int(p) for p in pins["numpy"].split(".")[:2]) < (2, 3)  # manylinux2014 wheels for 3.11
    for heavy in ("boto3", "botocore", "torch", "moto", "scikit-learn", "scipy", "rich", "mlxtend"):
        assert heavy not in pins, heavy


def test_torch_worker_is_an_optional_image(template: dict[str, Any]) -> None:
    res = template["Resources"]["TorchWorkerFunction"]
    assert res["Condition"] == "HasTorchWorker"
    assert res["Properties"]["PackageType"] == "Image"
    assert res["Properties"]["ImageUri"] == {"Ref": "TorchImageUri"}
    dockerfile = (ROOT / "functions" / "worker_image" / "Dockerfile").read_text()
    assert "FROM public.ecr.aws/lambda/python:3.11" in dockerfile
    assert "torch==2.13.0" in (ROOT / "functions" / "worker_image" / "requirements.txt").read_text()
    assert "download.pytorch.org/whl/cpu" in dockerfile


def test_vpc_only_with_a_cache(template: dict[str, Any]) -> None:
    for name, res in resources_of(template, *FUNCTION_TYPES).items():
        cond, when_true, when_false = res["Properties"]["VpcConfig"]["Fn::If"]
        assert (cond, when_false) == ("CacheOn", {"Ref": "AWS::NoValue"}), name
        assert when_true["SecurityGroupIds"] == [{"Fn::GetAtt": ["FunctionSecurityGroup", "GroupId"]}]
    for name, res in template["Resources"].items():
        if res["Type"].startswith(("AWS::EC2::", "AWS::ElastiCache::")):
            assert res.get("Condition") in {
                "CacheOn",
                "UseRedis",
                "UseMemcached",
                "CreateGatewayEndpoints",
                "CreateLambdaInterfaceEndpoint",
                "DirectOn",  # the direct channel's rendezvous service (tests/unit/test_template_direct.py)
            }, name


def test_cache_reachable_only_from_the_functions(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    cache_sg = {"Fn::GetAtt": ["CacheSecurityGroup", "GroupId"]}
    assert "SecurityGroupIngress" not in resources["CacheSecurityGroup"]["Properties"]
    ingress = [r["Properties"] for r in resources_of(template, "AWS::EC2::SecurityGroupIngress").values()]
    to_cache = [r for r in ingress if r["GroupId"] == cache_sg]
    assert len(to_cache) == 1
    (rule,) = to_cache
    assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": ["FunctionSecurityGroup", "GroupId"]}
    assert "CidrIp" not in rule and "CidrIpv6" not in rule
    assert rule["IpProtocol"] == "tcp" and rule["FromPort"] == rule["ToPort"]
    redis = resources["RedisCache"]
    assert redis["Type"] == "AWS::ElastiCache::ReplicationGroup" and redis["Condition"] == "UseRedis"
    assert redis["Properties"]["TransitEncryptionEnabled"] is True
    assert redis["Properties"]["AtRestEncryptionEnabled"] is True
    assert redis["Properties"]["SecurityGroupIds"] == [cache_sg]
    memcached = resources["MemcachedCache"]
    assert memcached["Type"] == "AWS::ElastiCache::CacheCluster" and memcached["Condition"] == "UseMemcached"
    assert memcached["Properties"]["VpcSecurityGroupIds"] == [cache_sg]


def test_outputs(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    for name in OUTPUTS:
        assert name in outputs, name
    assert outputs["CacheEndpoint"]["Condition"] == "CacheOn"
    assert outputs["Region"]["Value"] == {"Ref": "AWS::Region"}
    for name in ("DataBucketName", "CommBucketName", "JobsTableName", "ChannelTableName"):
        assert outputs[name]["Value"] == {"Ref": name.removesuffix("Name")}
    for name in ("CoordinatorFunctionName", "WorkerFunctionName"):
        assert outputs[name]["Value"] == {"Ref": name.removesuffix("Name")}


# ------------------------------------------------------------------------- translation


def translate(*parameters: str) -> dict[str, Any]:
    """template.yaml as plain CloudFormation, by aws-sam-translator in .venv-sam."""
    if not SAM_PYTHON.exists():
        pytest.skip(".venv-sam does not exist: run `make sam-env` (aws-sam-translator stays out of .venv)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_EC2_METADATA_DISABLED="true", SAM_CLI_TELEMETRY="0")
    command = [str(SAM_PYTHON), str(TRANSLATE), "-t", str(TEMPLATE), "--region", "us-east-1"]
    for parameter in parameters:
        command += ["--parameter", parameter]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


def test_translates_to_plain_cloudformation(template: dict[str, Any]) -> None:
    cfn = translate()
    assert "Transform" not in cfn
    types = {name: res["Type"] for name, res in cfn["Resources"].items()}
    assert not [t for t in types.values() if t.startswith("AWS::Serverless::")]
    expected = {
        "CoordinatorFunction": "AWS::Lambda::Function",
        "WorkerFunction": "AWS::Lambda::Function",
        "TorchWorkerFunction": "AWS::Lambda::Function",
        "DataBucket": "AWS::S3::Bucket",
        "CommBucket": "AWS::S3::Bucket",
        "JobsTable": "AWS::DynamoDB::Table",
        "ChannelTable": "AWS::DynamoDB::Table",
        "CoordinatorRole": "AWS::IAM::Role",
        "WorkerRole": "AWS::IAM::Role",
        "WorkerEventInvokeConfig": "AWS::Lambda::EventInvokeConfig",
    }
    assert {name: types.get(name) for name in expected} == expected
    worker = cfn["Resources"]["WorkerFunction"]["Properties"]
    assert worker["Code"] == {"S3Bucket": "lambdaml-local-code", "S3Key": "functions.zip"}
    assert worker["Role"] == getatt_arn("WorkerRole")  # no SAM-generated role
    assert worker["Environment"]["Variables"]["LAMBDAML_CHANNEL_TABLE"] == {"Ref": "ChannelTable"}
    assert not [n for n, t in types.items() if t == "AWS::IAM::Role" and n not in ("CoordinatorRole", "WorkerRole")]
    assert set(OUTPUTS) <= cfn["Outputs"].keys()
    # The roles and the data bucket's policy come through the transform as written (and as tested above).
    for role in FUNCTION_ROLES:
        assert s3_statements(cfn, role) == s3_statements(template, role), role
    assert bucket_policy_statements(cfn, "DataBucket") == bucket_policy_statements(template, "DataBucket")


def test_translates_with_a_cache_and_the_torch_worker() -> None:
    cfn = translate(
        "ChannelCache=Redis",
        "VpcId=vpc-0123456789abcdef0",
        "SubnetIds=subnet-0123456789abcdef0,subnet-0123456789abcdef1",
        "TorchImageUri=123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdaml-torch-worker:1",
    )
    torch = cfn["Resources"]["TorchWorkerFunction"]
    assert torch["Properties"]["PackageType"] == "Image"
    assert torch["Properties"]["Code"] == {"ImageUri": {"Ref": "TorchImageUri"}}


def test_translated_stack_creates_on_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's CloudFormation creates the translated stack (what `lambdaml local up` will do)."""
    cfn = translate()
    import io
    import zipfile

    import boto3
    from moto import mock_aws

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("worker/app.py", "def handler(event, context):\n    return None\n")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="lambdaml-local-code")
        s3.put_object(Bucket="lambdaml-local-code", Key="functions.zip", Body=code.getvalue())
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        with pytest.warns(UserWarning, match="not supported by moto"):  # BucketPolicy, EventInvokeConfig
            cloudformation.create_stack(
                StackName="lambdaml-test", TemplateBody=json.dumps(cfn), Capabilities=["CAPABILITY_IAM"]
            )
        (stack,) = cloudformation.describe_stacks(StackName="lambdaml-test")["Stacks"]
        assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
        assert set(OUTPUTS) - {"CacheEndpoint"} <= outputs.keys()
        assert "CacheEndpoint" not in outputs  # no cache by default
        table = boto3.client("dynamodb", region_name="us-east-1").describe_table(TableName=outputs["ChannelTableName"])
        assert table["Table"]["KeySchema"] == [{"AttributeName": "k", "KeyType": "HASH"}]
        function = boto3.client("lambda", region_name="us-east-1").get_function(
            FunctionName=outputs["WorkerFunctionName"]
        )
        assert function["Configuration"]["Handler"] == "worker.app.handler"
