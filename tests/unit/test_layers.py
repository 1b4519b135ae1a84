"""Layers point one way: every import in lambdaml/ and analytic_model/ (module level and inside
functions) goes down a layer or stays within one, and no module imports one that imports it back.
The layers are the block in docs/architecture.md, so the document and the code cannot drift apart."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("lambdaml", "analytic_model")
#: What the pure cost model may use of lambdaml.
ANALYTIC_MAY_USE = ("lambdaml.errors", "lambdaml.catalogue")


def layers() -> dict[str, int]:
    """Module prefix -> layer number, from the ```layers block of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    out: dict[str, int] = {}
    for line in block.group(1).splitlines():
        number, *prefixes = line.split()
        for prefix in prefixes:
            out[prefix] = int(number)
    return out


@functools.cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    """Every project module this one imports, anywhere in it, annotations' imports included
    (``from a import b`` may name module a.b)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = set(modules())
    names: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names}
            names.update(submodules)
            if not submodules <= known:  # it takes names of the package itself, not only its modules
                names.add(base)
    return {n for n in names if n.split(".")[0] in PACKAGES}


def layer_of(module: str, table: dict[str, int]) -> int:
    matches = [p for p in table if module == p or module.startswith(p + ".")]
    assert matches, f"{module} is in no layer of docs/architecture.md"
    return table[max(matches, key=len)]


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m in imports(name, path) if m in known and m != name} for name, path in known.items()}


def test_every_module_is_in_a_layer() -> None:
    table = layers()
    for name in modules():
        if name not in PACKAGES:
            layer_of(name, table)


def test_no_import_points_up_a_layer() -> None:
    table = layers()
    upward = [
        f"{name} (layer {layer_of(name, table)}) imports {dep} (layer {layer_of(dep, table)})"
        for name, deps in graph().items()
        if name not in PACKAGES
        for dep in deps
        if dep not in PACKAGES and layer_of(dep, table) > layer_of(name, table)
    ]
    assert not upward, "\n".join(sorted(upward))


def test_the_cost_model_uses_nothing_of_lambdaml_but_errors_and_the_catalogue() -> None:
    used = {
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if name.startswith("analytic_model")
        for dep in deps
        if dep.startswith("lambdaml") and dep not in ANALYTIC_MAY_USE and dep != "lambdaml"
    }
    assert not used, "\n".join(sorted(used))


def test_no_import_cycle() -> None:
    edges = graph()  # annotations' imports included: a type that needs its user is a knot too
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(edges[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    # A package's __init__ is how its modules are reached; it importing them is not a cycle with them.
    real = [c for c in cycles if not all(m in PACKAGES for m in c)]
    assert not real, "\n".join(" -> ".join(c) for c in real)
