"""Command-line interface: ``python -m lenscope <command> ...``.

Each module in :mod:`lenscope.cli` contributes one or more sub-commands through a
``register(subparsers)`` function that sets ``func`` on its parser; the CLI discovers them
(modules whose name starts with an underscore are shared helpers, not commands).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from lenscope.cli._common import (
    RESUMES,
    HelpFormatter,
    command_output,
    refuse_a_read_only_store,
    refuse_output_over_input,
    resolve_dataset,
)
from lenscope.errors import user_message


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors (a bad flag value, a missing argument) are one line and exit 2, and whose help
    shows every option's default (:class:`~lenscope.cli._common.HelpFormatter`: the one formatter, set here for the
    top parser and every sub-command's, which ``add_parser`` makes of this class)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `python -m {self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """Parser with every sub-command found in :mod:`lenscope.cli` (sub-command parsers are of the same class)."""
    from lenscope import __version__

    parser = _Parser(prog="lenscope", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print lenscope's version and exit")
    parser.add_argument("--debug", action="store_true", help="show the traceback of any failure")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(subparsers)
    for choice in subparsers._choices_actions:  # a command's --help opens with the line `lenscope --help` lists
        command = subparsers.choices[choice.dest]
        if command.description is None:
            command.description = (choice.help or "").replace("%%", "%")
    return parser


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of the sub-command ``command`` of :func:`build_parser`'s ``parser``."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command. A failure the user can act on (input, store, model, disk; an output file that is one of
    the command's inputs, refused before any work) prints one message and returns 2; any other prints its type and
    returns 1; tracebacks only with ``--debug``. A command that writes the store checks that it can before any work.
    Stopped (Ctrl-C, `kill`), it says what was kept: the command's
    ``interrupt_note``, by default :data:`~lenscope.cli._common.RESUMES`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_output_over_input(command_parser(parser, args.command), args)
        refuse_a_read_only_store(args)
        resolve_dataset(args)
        with command_output(args):  # --format csv/json/parquet to stdout: stdout holds the data alone
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"lenscope {args.command}: {getattr(args, 'interrupt_note', RESUMES)}", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        message = user_message(exc)
        if message is None:
            print(f"lenscope {args.command}: internal error: {type(exc).__name__}: {exc} (rerun with "
                  "`python -m lenscope --debug ...` for the traceback)", file=sys.stderr)
            return 1
        print(f"lenscope {args.command}: error: {message}", file=sys.stderr)
        return 2
