"""The command-line reference of the docs site, generated from the argparse parser at build time.

``docs/hooks.py`` puts :func:`cli_reference` into ``docs/reference/cli.md``; nothing of it is
written by hand, so a command or option added to :func:`benchmark.cli.build_parser` appears in
the next build (``tests/cli/test_docs_reference.py`` checks every option of every command).
"""
from __future__ import annotations

import argparse
import copy
from collections.abc import Iterator


def table_cell(text: object) -> str:
    """``text`` inside a markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    """Inline code that may hold backticks or pipes (a table cell)."""
    return f"<code>{table_cell(text).replace('<', '&lt;').replace('>', '&gt;')}</code>"


def subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(full command name, its parser, its one-line help) of every command, nested ones included,
    in the order the parser lists them."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            full = f"{prefix} {name}".strip()
            yield full, sub, helps.get(name, "")
            yield from subcommands(sub, full)


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a command's reference lists: every positional and option but ``--help`` and
    the sub-command selector (its commands get their own sections)."""
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text as ``--help`` prints it (``%(default)s`` and friends filled in, the default
    appended where the parser's formatter appends it)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    formatter = parser._get_formatter()
    shown = copy.copy(action)
    shown.help = formatter._get_help_string(action)  # the default appended, as --help shows it
    return formatter._expand_help(shown)


def _argument_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                  else action.dest.upper())
    shown = metavar if isinstance(metavar, str) else " ".join(metavar)
    suffix = {"?": f" [{shown}]", "*": f" [{shown} …]", "+": f" {shown} […]"}.get(str(action.nargs), f" {shown}")
    return ", ".join(action.option_strings) + suffix


def _choices(action: argparse.Action) -> str:
    return ", ".join(f"`{c}`" for c in action.choices) if action.choices else ""


def command_section(name: str, parser: argparse.ArgumentParser, summary: str) -> str:
    """One command: its summary, usage line, description and a table of its arguments."""
    lines = [f"## `protobench {name}`", ""]
    if summary:
        lines += [" ".join(summary.split()), ""]
    usage = " ".join(parser.format_usage().removeprefix("usage: ").split())
    lines += ["```text", usage, "```", ""]
    if parser.description and parser.description != summary:
        lines += [" ".join(parser.description.split()), ""]
    actions = documented_actions(parser)
    if actions:
        lines += ["| argument | what it does | choices |", "|---|---|---|"]
        for action in actions:
            lines.append(f"| {_code(_argument_name(action))} | {table_cell(_expanded_help(parser, action))} | "
                         f"{table_cell(_choices(action))} |")
        lines.append("")
    nested = [full for full, _, _ in subcommands(parser, name)]
    if nested:
        lines += ["Sub-commands: " + ", ".join(f"`{n}`" for n in nested) + ".", ""]
    return "\n".join(lines)


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole CLI reference as markdown: the top-level options, a table of contents of the
    commands, then one section per command (``parser``: default the suite's own)."""
    if parser is None:
        from benchmark.cli import build_parser

        parser = build_parser()
    commands = list(subcommands(parser))
    lines = ["| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#protobench-{name.replace(' ', '-')}) | {table_cell(summary)} |" for name, _, summary in commands]
    lines += ["", "Options of `protobench` itself:", ""]
    lines += [f"- `{_argument_name(a)}`: {table_cell(_expanded_help(parser, a))}" for a in documented_actions(parser)]
    lines.append("")
    return "\n".join(lines) + "\n" + "\n".join(command_section(name, sub, summary) for name, sub, summary in commands)
