"""Measures of the code itself, one test each: a measure that slips fails here, naming where."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import add_inner_blocks, cc_visit
from radon.visitors import Class

ROOT = Path(__file__).resolve().parents[2]

#: Packages whose every function (methods and nested functions included) stays readable: the
#: worker core, the runtime around it, the backends and the platforms they drive, where new features tend to land.
COMPLEXITY_PACKAGES = ("lambdaml/runtime", "lambdaml/backends", "lambdaml/platforms")
MAX_COMPLEXITY = 15


def test_no_function_in_the_runtime_or_backends_exceeds_the_complexity_bound() -> None:
    over = []
    for package in COMPLEXITY_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for block in add_inner_blocks(cc_visit(path.read_text())):
                if not isinstance(block, Class) and block.complexity > MAX_COMPLEXITY:
                    over.append(f"{path.relative_to(ROOT)}:{block.lineno} {block.fullname} ({block.complexity})")
    assert not over, f"cyclomatic complexity over {MAX_COMPLEXITY} (radon): " + ", ".join(sorted(over))


PACKAGES = ("lambdaml", "analytic_model")
MAX_LINES = 500
#: Files that may name a channel kind outside lambdaml/channels/, where each kind's module and its
#: description (lambdaml/channels/kinds/) are: everything else asks the description.
MAX_FILES_NAMING_A_KIND = 3


def _sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_no_source_file_exceeds_the_line_bound() -> None:
    over = [
        f"{path.relative_to(ROOT)} ({lines})"
        for path in _sources()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not over, f"files over {MAX_LINES} lines: " + ", ".join(over)


def test_a_channel_kind_is_named_in_few_files_outside_the_channels() -> None:
    channels = ROOT / "lambdaml" / "channels"
    for kind in ("memcached", "dynamodb"):
        naming = [
            str(path.relative_to(ROOT))
            for path in _sources()
            if not path.is_relative_to(channels) and kind in path.read_text()
        ]
        assert len(naming) <= MAX_FILES_NAMING_A_KIND, f"{kind!r} is named in {len(naming)} files: {naming}"


#: Untyped mappings that may remain, each where JSON of no fixed shape enters or leaves.
MAX_UNTYPED_MAPPINGS = 40


def test_untyped_mappings_stay_at_the_json_boundaries() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _sources()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for _ in range(line.count("dict[str, Any]"))
    ]
    assert len(found) <= MAX_UNTYPED_MAPPINGS, f"{len(found)} dict[str, Any]: " + ", ".join(found)
