"""The user's guide stays a guide: README.md short and undated, no development diary in any
document, every relative link (and heading anchor) resolving, and every `lambdaml` command in a
shell block accepted by the real parser, so a renamed flag breaks this test, not a reader."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from lambdaml.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: Documents whose links are checked: the guide and its reference pages.
LINKED = [README, *DOCS]
#: Documents that must read as documentation, not as a lab notebook.
PROSE = [*LINKED, ROOT / "SECURITY.md", ROOT / "bench" / "README.md", ROOT / "bench" / "RESULTS.md"]
MAX_README_LINES = 250

#: Phrases of a diary: what changed when, what else ran, plans, and a design note outside the repo.
DIARY = [
    r"What changed on",
    r"runs that day",
    r"\bBefore today\b",
    r"\b(this|last|afternoon|morning) session\b",
    r"\barrives with\b",
    r"\bother agents?\b",
    r"DESIGN\.md",
]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose_of(text: str) -> str:
    """Text outside fenced blocks and inline code, where a bracket pair is a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    return LINK.findall(_prose_of(path.read_text()))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", path.read_text()), re.M):
        base, n = slug(heading), 0
        while (name := base if n == 0 else f"{base}-{n}") in found:  # GitHub numbers repeats
            n += 1
        found.add(name)
    return found


def shell_commands(path: Path) -> list[list[str]]:
    """Each `lambdaml ...` command line in the document's sh blocks, as argv without the program."""
    commands = []
    for language, body in FENCE.findall(path.read_text()):
        if (language.split() or [""])[0] not in ("sh", "bash", "console"):  # "sh runnable" too
            continue
        for line in body.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv and argv[-1] == "&":
                argv = argv[:-1]
            if argv and Path(argv[0]).name == "lambdaml":
                commands.append(argv[1:])
    return commands


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move reference to docs/"


def test_readme_has_no_dates() -> None:
    # Dated measurements belong in bench/RESULTS.md; a date in the guide is history or staleness.
    dates = re.findall(r"20\d\d-\d\d-\d\d", README.read_text())
    assert not dates, f"README.md carries dates {dates}; dated tables go in bench/RESULTS.md"


def test_readme_starts_with_demo_and_test() -> None:
    text = README.read_text()
    head = text[: text.index("\n## ")]  # before the first section
    assert "make demo" in head and "make test" in head


@pytest.mark.parametrize("path", PROSE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_diary(path: Path) -> None:
    text = path.read_text()
    found = [pattern for pattern in DIARY if re.search(pattern, text)]
    assert not found, f"{path.relative_to(ROOT)} reads like a diary: {found}"


def test_links_are_found() -> None:
    # Guards the link checks below against a regex that silently matches nothing.
    targets = links(README)
    assert len(targets) >= 10
    assert "docs/cli.md" in targets


def test_readme_links_every_docs_page() -> None:
    linked = {(README.parent / target.split("#")[0]).resolve() for target in links(README)}
    missing = [str(p.relative_to(ROOT)) for p in DOCS if p.resolve() not in linked]
    # docs/cli.md is generated from the parser; it is linked too once it exists.
    assert not missing, f"README.md links no {missing}"


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    # docs/cli.md counts as required: it is generated from the parser (and kept current by its own
    # test), and a guide that links it must ship with it.
    broken = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        exists = resolved.exists()
        if not exists or (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


def test_commands_are_found() -> None:
    # Guards the flag check below: the tour's commands are in sh blocks.
    subcommands = {argv[0] for argv in shell_commands(README)}
    assert {"train", "compare", "local", "advise", "data"} <= subcommands


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_parse(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for argv in shell_commands(path):
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path.relative_to(ROOT)}: lambdaml {shlex.join(argv)}: {capsys.readouterr().err.strip()}")
