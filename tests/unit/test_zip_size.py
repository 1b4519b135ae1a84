"""The zip-size check of sam build's output: size limit, and extensions built for the function's architecture."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _check_zip_size() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_zip_size", ROOT / "infra" / "sam" / "check_zip_size.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_zip_size"] = module
    spec.loader.exec_module(module)
    return module


def _build(tmp_path: Path, extension: str, size: int = 10) -> Path:
    build = tmp_path / "sam"
    worker = build / "WorkerFunction" / "numpy" / "_core"
    worker.mkdir(parents=True)
    (worker / extension).write_bytes(b"x" * size)
    (build / "template.yaml").write_text(
        "Resources:\n  WorkerFunction:\n    Type: AWS::Serverless::Function\n"
        "    Properties: {CodeUri: WorkerFunction, Architectures: [!Ref Architecture]}\n"
    )
    return build


@pytest.mark.parametrize(
    ("extension", "architecture", "code"),
    [
        ("_umath.cpython-311-x86_64-linux-gnu.so", "x86_64", 0),
        ("_umath.cpython-311-aarch64-linux-gnu.so", "arm64", 0),
        ("_umath.cpython-311-x86_64-linux-gnu.so", "arm64", 1),  # a wheel for the build machine
        ("_umath.cpython-311-aarch64-linux-gnu.so", "x86_64", 1),
    ],
)
def test_extensions_must_match_the_functions_architecture(
    tmp_path: Path, extension: str, architecture: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    build = _build(tmp_path, extension)
    assert _check_zip_size().main(["--build-dir", str(build), "--architecture", architecture]) == code
    if code:
        assert f"is not built for {architecture}" in capsys.readouterr().err


def test_a_function_over_the_limit_fails(tmp_path: Path) -> None:
    build = _build(tmp_path, "_umath.cpython-311-x86_64-linux-gnu.so", size=2 * 1024 * 1024)
    assert _check_zip_size().main(["--build-dir", str(build), "--limit-mb", "1"]) == 1
    assert _check_zip_size().main(["--build-dir", str(build), "--limit-mb", "3"]) == 0


@pytest.mark.parametrize("package", ["pyarrow", "onnx", "mlflow", "sklearn"])
def test_a_command_line_package_in_the_zip_fails(
    tmp_path: Path, package: str, capsys: pytest.CaptureFixture[str]
) -> None:
    build = _build(tmp_path, "_umath.cpython-311-x86_64-linux-gnu.so")
    assert _check_zip_size().main(["--build-dir", str(build)]) == 0
    assert "command-line-only packages in the zip functions: none" in capsys.readouterr().out
    (build / "WorkerFunction" / package).mkdir()
    (build / "WorkerFunction" / package / "__init__.py").write_text("")
    assert _check_zip_size().main(["--build-dir", str(build)]) == 1
    assert f"{package} belong to the command-line environment" in capsys.readouterr().err
