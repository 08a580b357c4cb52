"""The CLI reference page, written from the argparse parser itself (:func:`lenscope.cli.build_parser`), so a flag
documented is a flag that exists, with the default the code has."""

from __future__ import annotations

import argparse

import pandas as pd

from lenscope.figures.markdown import table


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sorted(action.choices.items()))


def _default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS, False, "") or isinstance(action, argparse._StoreTrueAction):
        return ""
    return f"`{action.default}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = (action.help or "").replace("%%", "%")
    if "%(" in text:
        text = parser._get_formatter()._expand_help(action)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += " (one of: " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return " ".join(text.split()).replace("[", "\\[").replace("]", "\\]")


def _options(parser: argparse.ArgumentParser) -> pd.DataFrame:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        name = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.option_strings and action.nargs != 0:
            name += f" `{action.metavar or action.dest.upper()}`"
        rows.append({"argument": name, "default": _default(action), "what": _help(parser, action)})
    return pd.DataFrame(rows, columns=["argument", "default", "what"])


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n")[0]


def cli_reference() -> str:
    """One section per command: its description, usage line and a table of its arguments."""
    from lenscope.cli import build_parser

    parser = build_parser()
    commands = _subcommands(parser)
    summary = pd.DataFrame([{"command": f"[`{n}`](#{n})", "what it does": _first_line(p.description)}
                            for n, p in commands.items()])
    parts = [table(summary), ""]
    for name, command in commands.items():
        usage = " ".join(command.format_usage().removeprefix("usage: ").split())
        description = (command.description or "").strip()
        parts += [f"## {name}", "", *(["```text", description, "```"] if "\n" in description else [description]),
                  "", "```text", usage, "```", "", table(_options(command)), ""]
    return "\n".join(parts)
