"""docs/cli.md is the command's reference as its parser renders it now, naming every command and flag."""

from __future__ import annotations

from pathlib import Path

from lambdaml.cli.parser import build_parser, subcommands
from lambdaml.cli.reference import render

ROOT = Path(__file__).resolve().parents[2]


def test_docs_cli_md_is_what_the_parser_renders() -> None:
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert committed == render(), (
        "docs/cli.md is out of date with the parser: regenerate it with 'make cli-docs' "
        "(python -m lambdaml.cli.reference > docs/cli.md) and commit it"
    )


def test_the_reference_names_every_command_and_flag() -> None:
    text = render()
    for parser, depth in subcommands(build_parser()):
        assert f"{'#' * (depth + 2)} `{parser.prog}`\n" in text, parser.prog
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"`{flag}" in text, (parser.prog, flag)
    assert "`--backend BACKEND` | where workers run" in text and "one of `local`, `iaas-local`" in text


def test_a_changed_parser_renders_a_different_reference() -> None:
    parser = build_parser()
    parser.add_argument("--colour", choices=["auto", "never"], default="auto", help="when to colour | pipes")
    text = render(parser)
    assert "| `--colour COLOUR` | when to colour \\| pipes; one of `auto`, `never`; default: `auto` |" in text
    assert text != render()
