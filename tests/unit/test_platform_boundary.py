"""The worker core and the runtime know no cloud's functions: everything that knows Lambda lives in
``lambdaml.platforms.aws_lambda``, behind the platform interface, so another cloud is a package
beside it. Read from the imports and the code itself (as ``test_layers`` reads them), not by running it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_layers import ROOT, imports, modules

#: The worker core (what trains a rank) and the runtime around it (what runs a job's ranks).
CORE = (
    "lambdaml.algorithms",
    "lambdaml.comm",
    "lambdaml.sync",
    "lambdaml.channels",
    "lambdaml.models",
    "lambdaml.data",
    "lambdaml.compression",
    "lambdaml.optim",
    "lambdaml.runtime",
)
LAMBDA_PACKAGE = "lambdaml.platforms.aws_lambda"

#: boto3 clients only a Lambda stack needs: its functions, their logs, its CloudFormation outputs.
LAMBDA_CLIENTS = frozenset({"lambda", "logs", "cloudformation"})
#: Names from Lambda's own interfaces: its context object, its Invoke answer and invocation types,
#: its on-failure record, its error types.
LAMBDA_NAMES = frozenset(
    {
        "get_remaining_time_in_millis",
        "aws_request_id",
        "memory_limit_in_mb",
        "FunctionError",
        "RequestResponse",
        "InvocationType",
        "requestPayload",
        "requestContext",
        "responsePayload",
    }
)
LAMBDA_ERROR_PREFIXES = ("Runtime.", "Sandbox.")
#: Modules of the core that may build a client named above, and why: not for a Lambda stack.
ALLOWED_CLIENTS = {
    ("lambdaml.runtime.cluster", "cloudformation"): "the IaaS cluster (EC2) is deployed from its own template",
}


def core_modules() -> dict[str, Path]:
    return {
        name: path
        for name, path in modules().items()
        if any(name == prefix or name.startswith(prefix + ".") for prefix in CORE)
    }


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (what the code says of itself, not does)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def client_names(tree: ast.AST) -> set[str]:
    """The services of every ``*client("SERVICE", ...)`` call: boto3's, ``aws.client`` or a wrapper."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            service = node.args[0]
            if called.endswith("client") and isinstance(service, ast.Constant) and isinstance(service.value, str):
                found.add(service.value)
    return found


def lambda_names(tree: ast.AST) -> set[str]:
    """The names of Lambda's interfaces the code uses: as attributes, names, keywords or strings."""
    skip = docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found.add(node.value)
            found.update(n for n in LAMBDA_NAMES if n in node.value)
    return {n for n in found if n in LAMBDA_NAMES or n.startswith(LAMBDA_ERROR_PREFIXES)}


def test_the_core_and_the_runtime_are_checked() -> None:
    names = core_modules()
    assert "lambdaml.runtime.worker" in names and "lambdaml.algorithms.ga_sgd" in names
    assert LAMBDA_PACKAGE + ".handlers" in modules()  # the package this test keeps them apart from


def test_the_core_and_the_runtime_import_nothing_of_the_lambda_package() -> None:
    reached = [
        f"{name} imports {dep}"
        for name, path in core_modules().items()
        for dep in imports(name, path)
        if dep == LAMBDA_PACKAGE or dep.startswith(LAMBDA_PACKAGE + ".") or dep == "lambdaml.platforms"
    ]
    assert not reached, "\n".join(sorted(reached))


def test_the_core_and_the_runtime_build_no_lambda_client() -> None:
    built = [
        f"{name} builds a {service!r} client"
        for name, path in core_modules().items()
        for service in sorted(client_names(ast.parse(path.read_text())) & LAMBDA_CLIENTS)
        if (name, service) not in ALLOWED_CLIENTS
    ]
    assert not built, "\n".join(built)


def test_the_core_and_the_runtime_use_no_name_of_lambdas_interfaces() -> None:
    used = [
        f"{name} uses {found!r}"
        for name, path in core_modules().items()
        for found in sorted(lambda_names(ast.parse(path.read_text())))
    ]
    assert not used, "\n".join(used)


def test_the_checks_see_what_the_lambda_package_does() -> None:
    """The same readings find Lambda where it is, so an empty answer above means something."""
    package = ROOT / "lambdaml" / "platforms" / "aws_lambda"
    trees = [ast.parse(path.read_text()) for path in package.glob("*.py")]
    assert set().union(*map(client_names, trees)) >= {"lambda", "logs", "cloudformation"}
    names = set().union(*map(lambda_names, trees))
    assert {"get_remaining_time_in_millis", "FunctionError", "requestPayload", "Runtime.OutOfMemory"} <= names
