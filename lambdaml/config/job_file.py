"""Reading a job file: JSON, or YAML with 1.2's floats and no duplicate keys."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from lambdaml.errors import ConfigError, brief


def read_job_file(path: str | Path) -> Any:
    """A job file's content, parsed but not yet validated (``--stack`` fills in resources first)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"job file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read job file {str(path)!r}: {exc}") from None
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        if kind == "JSON":
            return json.loads(text, object_pairs_hook=_unique_keys)
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: no Python objects
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(f"{path}: not valid {kind} ({where}{problem})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid {kind} (nested too deeply)") from None
    except ValueError as exc:  # a duplicate JSON key, an integer of more than 4,300 digits
        problem = "an integer has more than 4300 digits" if "digits" in str(exc) else str(exc)
        raise ConfigError(f"{path}: not valid {kind} ({problem})") from None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object, refusing a key given twice (json.loads would keep the last silently)."""
    data: dict[str, object] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML forbids it; PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"duplicate key {brief(key)}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 core-schema floats, which PyYAML (YAML 1.1) reads as strings when they have no dot
# or an unsigned exponent: 1e-3, 3E-4, 1e5, 2.5e3, -.5. Only forms with a dot or an exponent
# are added, so ints stay ints (and "09", a string today, stays one). No underscores: YAML 1.2
# has none, so "1_0e3" stays a string; PyYAML's own 1.1 resolvers still read 1_000 as the int
# 1000 and 1_000.5 as a float, as before. .inf and .nan are resolved as before.
_YAML12_FLOAT = re.compile(r"^[-+]?(?:(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)$")

# The resolvers are a class-level dict of lists shared with SafeLoader; add_implicit_resolver copies
# them for a subclass in PyYAML 6 but appended to SafeLoader's own lists in older releases. Copying
# here keeps yaml.safe_load (used elsewhere) exactly as PyYAML ships it, whatever the version.
_StrictLoader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))
