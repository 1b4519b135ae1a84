"""Fail when a zip function built by `sam build` is too big for Lambda.

Lambda caps a zip function at 250 MB unzipped (262,144,000 bytes: the code plus its layers).
This reads the built template that `sam build` wrote (BUILD_DIR/template.yaml), measures
each zip function's artifact directory, prints a table and exits 1 when any function is at
or over the limit. Run by `make zip-size-check` with .venv-sam's Python (stdlib + PyYAML).

    python infra/sam/check_zip_size.py [--build-dir build/sam] [--limit-mb 250] [--architecture arm64]

With ``--architecture`` it also fails when a compiled extension is built for another
instruction set (a wheel for the build machine instead of the function's architecture).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

MB = 1024 * 1024  # Lambda's "250 MB" is 262,144,000 bytes = 250 * 2**20
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
# What CPython's extension-module suffix names each Lambda architecture.
EXTENSION_TAGS = {"x86_64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
#: Packages of the command-line environment (data prepare, exports, tracking, plots, the local
#: stack): a worker never imports them, and none may reach the zip through a requirement.
COMMAND_LINE_ONLY = (
    "pyarrow", "onnx", "onnxruntime", "safetensors", "mlflow", "sklearn", "scipy", "pandas", "torch",
    "matplotlib", "rich", "moto", "boto3",
)  # fmt: skip


class _CfnLoader(yaml.SafeLoader):
    """A SafeLoader that accepts CloudFormation short tags (!Ref, !GetAtt, ...)."""


def _cfn_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        assert isinstance(node, yaml.MappingNode)
        value = loader.construct_mapping(node, deep=True)
    name = tag_suffix if tag_suffix in ("Ref", "Condition") else f"Fn::{tag_suffix}"
    return {name: value}


_CfnLoader.add_multi_constructor("!", _cfn_tag)


def tree_size(root: Path) -> tuple[int, int, dict[str, int]]:
    """Total bytes and files under root (links not followed), and bytes per top-level entry."""
    total = files = 0
    per_entry: dict[str, int] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        for name in filenames:
            size = (Path(dirpath) / name).lstat().st_size
            total += size
            files += 1
            top = rel.parts[0] if rel.parts else name
            per_entry[top] = per_entry.get(top, 0) + size
    return total, files, per_entry


def foreign_extensions(root: Path, architecture: str) -> list[str]:
    """Compiled extension modules under root that are built for another architecture."""
    wanted = EXTENSION_TAGS[architecture]
    others = [tag for tag in EXTENSION_TAGS.values() if tag != wanted]
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.so") if any(tag in path.name for tag in others))


def zip_functions(build_dir: Path) -> dict[str, Path]:
    """Logical id -> artifact directory of every zip function in the built template."""
    template = yaml.load((build_dir / "template.yaml").read_text(), Loader=_CfnLoader)
    found: dict[str, Path] = {}
    for logical_id, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") not in FUNCTION_TYPES:
            continue
        props = resource.get("Properties") or {}
        if props.get("PackageType", "Zip") != "Zip":
            continue
        code = props.get("CodeUri", props.get("Code"))
        if not isinstance(code, str) or code.startswith("s3://"):
            continue  # not built locally
        found[logical_id] = (build_dir / code).resolve()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=Path("build/sam"), help="sam build's --build-dir")
    parser.add_argument("--limit-mb", type=float, default=250.0, help="fail at or above this many MB (2**20 bytes)")
    parser.add_argument("--architecture", choices=sorted(EXTENSION_TAGS), help="check extensions are built for it")
    args = parser.parse_args(argv)

    if not (args.build_dir / "template.yaml").is_file():
        print(f"check_zip_size: no {args.build_dir / 'template.yaml'}; run `sam build` first", file=sys.stderr)
        return 1
    functions = zip_functions(args.build_dir)
    if not functions:
        print(f"check_zip_size: no zip function in {args.build_dir / 'template.yaml'}", file=sys.stderr)
        return 1

    limit = args.limit_mb * MB
    rows = []
    failed = False
    for logical_id, path in sorted(functions.items()):
        if not path.is_dir():
            print(f"check_zip_size: {logical_id}: {path} is missing", file=sys.stderr)
            return 1
        total, files, per_entry = tree_size(path)
        over = total >= limit
        failed |= over
        if args.architecture:
            foreign = foreign_extensions(path, args.architecture)
            if foreign:
                message = f"check_zip_size: {logical_id}: {foreign[0]} is not built for {args.architecture}"
                print(message, file=sys.stderr)
                failed = True
        foreign_packages = sorted(name for name in per_entry if name in COMMAND_LINE_ONLY)
        if foreign_packages:
            print(
                f"check_zip_size: {logical_id}: {', '.join(foreign_packages)} belong to the command-line "
                "environment, not the Lambda zip (functions/requirements.txt)",
                file=sys.stderr,
            )
            failed = True
        largest = sorted(per_entry.items(), key=lambda kv: -kv[1])[:3]
        rows.append(
            (
                logical_id,
                str(files),
                f"{total / MB:.1f}",
                f"{args.limit_mb:.0f}",
                "TOO BIG" if over else "ok",
                ", ".join(f"{name} {size / MB:.1f}" for name, size in largest),
            )
        )

    header = ("function", "files", "unzipped MB", "limit MB", "status", "largest entries (MB)")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(
        f"command-line-only packages in the zip functions: none of {', '.join(COMMAND_LINE_ONLY)}" if not failed else ""
    )
    if failed:
        print(
            "check_zip_size: a zip function is too big, built for another architecture or holds a command-line package",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
