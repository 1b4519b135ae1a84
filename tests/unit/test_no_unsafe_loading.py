"""Nothing in the code base deserializes with pickle, an unrestricted torch.load, numpy's
pickle path or an unsafe YAML loader; the one pickle reader is the CIFAR-10 allow-list.

A scan of the syntax tree of every Python file we ship or run (library, handlers, model,
benchmarks), so a new ``pickle.loads`` fails here before it reaches a worker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["lambdaml", "functions", "analytic_model", "bench", "infra"]
# The CIFAR-10 python batches are pickles: read only by an Unpickler whose find_class resolves
# an explicit allow-list of numpy constructors (tests/unit/test_formats_more.py attacks it).
PICKLE_READER = ROOT / "lambdaml" / "data" / "formats" / "cifar.py"
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader"}  # plus, per file, the classes it derives from them
FORBIDDEN_CALLS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("marshal", "load"),
    ("marshal", "loads"),
    ("shelve", "open"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
    ("yaml", "load_all"),
    ("dill", "load"),
    ("dill", "loads"),
    ("jsonpickle", "decode"),
}


def sources() -> list[Path]:
    """Every Python file once (functions/ links to the packages)."""
    files = {p.resolve() for folder in SCANNED for p in (ROOT / folder).rglob("*.py")}
    return sorted(p for p in files if ROOT in p.parents and ".venv" not in p.parts)


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def problems(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(), str(path))
    safe_loaders = SAFE_YAML_LOADERS | {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(getattr(b, "attr", getattr(b, "id", None)) in SAFE_YAML_LOADERS for b in node.bases)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            where = f"{path.relative_to(ROOT) if ROOT in path.parents else path}:{node.lineno}"
            if (owner, name) in FORBIDDEN_CALLS:
                found.append(f"{where}: {owner}.{name}")
            if isinstance(func, ast.Name) and name in ("eval", "exec"):
                found.append(f"{where}: {name}()")
            if owner == "torch" and name == "load":
                weights_only = keyword(node, "weights_only")
                if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                    found.append(f"{where}: torch.load without weights_only=True")
            if owner in ("np", "numpy") and name == "load":
                allow = keyword(node, "allow_pickle")
                if not (isinstance(allow, ast.Constant) and allow.value is False):
                    found.append(f"{where}: np.load without allow_pickle=False")
            if owner == "yaml" and name == "load":
                loader = keyword(node, "Loader")
                loader_name = loader.attr if isinstance(loader, ast.Attribute) else getattr(loader, "id", None)
                if loader_name not in safe_loaders:
                    found.append(f"{where}: yaml.load with Loader={loader_name}")
        if isinstance(node, ast.ClassDef) and path != PICKLE_READER:
            for base in node.bases:
                if isinstance(base, ast.Attribute) and base.attr == "Unpickler":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: an Unpickler outside the CIFAR-10 reader")
    return found


def test_the_scan_sees_the_code_base() -> None:
    files = sources()
    assert ROOT / "lambdaml" / "codec.py" in files and PICKLE_READER in files
    assert len(files) > 40


@pytest.mark.parametrize(
    ("snippet", "complaint"),
    [
        ("import pickle\npickle.loads(b'')", "pickle.loads"),
        ("import torch\ntorch.load('m.pt')", "weights_only"),
        ("import numpy as np\nnp.load('a.npz')", "allow_pickle"),
        ("import yaml\nyaml.load('a', Loader=yaml.Loader)", "Loader=Loader"),
        ("eval('1')", "eval()"),
    ],
)
def test_the_scan_catches_each_unsafe_call(tmp_path: Path, snippet: str, complaint: str) -> None:
    path = tmp_path / "scan_probe.py"  # never in the tree: other tests, run alongside, read it
    path.write_text(snippet)
    assert any(complaint in p for p in problems(path))


def test_no_unsafe_deserialization_anywhere() -> None:
    found = [problem for path in sources() for problem in problems(path)]
    assert found == []
