"""The command's reference in Markdown, rendered from its parser, so the two cannot drift apart.

``python -m lambdaml.cli.reference > docs/cli.md`` (``make cli-docs``) writes it; a test holds
docs/cli.md to what this renders.
"""

from __future__ import annotations

import argparse
import sys
from typing import TypeGuard

from lambdaml.cli.parser import build_parser, subcommands

#: Usage lines are wrapped at a fixed width, not the terminal's, so every machine renders the same file.
USAGE_WIDTH = 88


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole reference: every command's usage and arguments, depth first."""
    parser = parser or build_parser()
    helps = _command_helps(parser)
    lines = [
        f"# The `{parser.prog}` command",
        "",
        "Generated from the command's parser by `make cli-docs` "
        "(`python -m lambdaml.cli.reference > docs/cli.md`); edit the parser, not this file.",
        "",
        "Every mistake on the command line ends with one line on stderr and exit status 1; a mistyped "
        'subcommand, choice or option gets a "did you mean", and an option is never abbreviated '
        "(`--worker` is not `--workers`). `-h`, `-v` and `-q` work on every command, before or after its "
        "subcommand; `-q` prints only results and errors. Ctrl-C ends any command with one line saying "
        "what stopped (and, for a job, how to go on) and exit status 130.",
    ]
    for command, depth in subcommands(parser):
        lines += ["", f"{'#' * min(depth + 2, 6)} `{command.prog}`", ""]
        about = (helps.get(command.prog) or command.description or "").rstrip(".")
        if about:
            lines += [_cell(about[0].upper() + about[1:]) + ".", ""]
        lines += ["```text", _usage(command), "```"]
        # -h, -v and -q are the same on every command: listed once, at the top.
        shown = [a for a in command._actions if not _is_subcommands(a) and (depth == 0 or not _everywhere(a))]
        rows = [_row(action, command) for action in shown]
        if rows:
            lines += ["", "| argument | description |", "| --- | --- |", *rows]
        children = [a for a in command._actions if _is_subcommands(a)]
        for action in children:
            lines += ["", "| command | description |", "| --- | --- |"]
            for choice in action._get_subactions():
                lines.append(f"| `{command.prog} {choice.dest}` | {_cell(choice.help or '')} |")
    return "\n".join(lines) + "\n"


def _is_subcommands(action: argparse.Action) -> TypeGuard[argparse._SubParsersAction[argparse.ArgumentParser]]:
    return isinstance(action, argparse._SubParsersAction)


def _everywhere(action: argparse.Action) -> bool:
    return isinstance(action, argparse._HelpAction) or action.dest.startswith(("verbose_", "quiet_"))


def _command_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line help, as its parent lists it, by the subcommand's prog."""
    helps: dict[str, str] = {}
    for command, _ in subcommands(parser):
        for action in command._actions:
            if _is_subcommands(action):
                for choice in action._get_subactions():
                    helps[f"{command.prog} {choice.dest}"] = choice.help or ""
    return helps


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _row(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    if action.option_strings:
        value = "" if action.nargs == 0 else " " + _metavar(action)
        names = ", ".join(f"`{flag}{value}`" for flag in action.option_strings)
    else:
        names = f"`{_metavar(action)}`"
    text = (action.help or "") % {**vars(action), "prog": parser.prog}
    notes = []
    if action.choices is not None and not _is_subcommands(action):
        notes.append("one of " + ", ".join(f"`{choice}`" for choice in action.choices))
    if action.required and action.option_strings:
        notes.append("required")
    shown = action.default not in (None, False, 0, argparse.SUPPRESS) and action.nargs != 0
    if shown and "default" not in (action.help or ""):  # where the help does not say it already
        notes.append(f"default: `{action.default}`")
    description = "; ".join(part for part in (_cell(text), *notes) if part)
    return f"| {names} | {description} |"


def _metavar(action: argparse.Action) -> str:
    name = action.metavar if isinstance(action.metavar, str) else None
    name = name or (action.dest.upper() if action.option_strings else action.dest)
    if action.nargs == "?":
        return f"[{name}]"
    if action.nargs in ("+", "*"):
        return f"{name} ..."
    return name


def _cell(text: str) -> str:
    """Text inside a Markdown table cell: no column breaks, no stray emphasis or HTML."""
    return text.replace("|", "\\|").replace("*", "\\*").replace("<", "&lt;")


if __name__ == "__main__":
    sys.stdout.write(render())
