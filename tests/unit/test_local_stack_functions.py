"""The local stack reads its functions' settings from template.yaml as CloudFormation would resolve them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lambdaml.local import stack

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
OUTPUTS = {"CoordinatorFunctionName": "c-fn", "WorkerFunctionName": "w-fn"}


def _by_logical(overrides: dict[str, str]) -> dict[str, dict[str, object]]:
    return {f["logical"]: f for f in stack.function_configs(TEMPLATE, OUTPUTS, overrides)}


def test_the_worker_reservation_follows_the_template_parameter() -> None:
    default = _by_logical({})
    assert default["WorkerFunction"]["reserved_concurrency"] is None  # -1: no reservation (AWS::NoValue)
    assert default["CoordinatorFunction"]["reserved_concurrency"] is None
    reserved = _by_logical({"WorkerReservedConcurrency": "6"})
    assert reserved["WorkerFunction"]["reserved_concurrency"] == 6
    assert reserved["WorkerFunction"]["name"] == "w-fn" and reserved["WorkerFunction"]["architecture"] == "x86_64"
    assert _by_logical({"WorkerMemoryMB": "3008"})["WorkerFunction"]["memory_mb"] == 3008
    arm = _by_logical({"Architecture": "arm64"})
    assert {f["architecture"] for f in arm.values()} == {"arm64"}
    assert arm["WorkerFunction"]["environment"]["LAMBDAML_ARCHITECTURE"] == "arm64"


@pytest.mark.parametrize(("limit", "minimum"), [(1000, 100), (50, 5), (5, 0), (20000, 100)])
def test_an_account_keeps_part_of_its_concurrency_unreserved(limit: int, minimum: int) -> None:
    assert stack.unreserved_minimum(limit) == minimum
