"""``lenscope docs``: render every table of README.md and docs/ from data/results and data/benchmarks, or check
that they agree (``--check``, what CI and the docs build run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lenscope.cli._common import PARTLY_WRITTEN


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("docs", help="write the rendered tables of README.md and docs/ from data/results and "
                                           "data/benchmarks (with --check: only say which disagree)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a rendered table disagrees with "
                                                        "data/ and name it")
    p.add_argument("--root", type=Path, default=None, help="the checkout (default: this one)")
    p.set_defaults(func=run, interrupt_note=PARTLY_WRITTEN)  # --check writes nothing


def run(args: argparse.Namespace) -> int:
    from lenscope.docs.site import RENDER_COMMAND, check, write
    from lenscope.store.settings import APP_ROOT, CHECKOUT

    root = args.root or APP_ROOT
    if args.root is None and not CHECKOUT:
        raise ValueError("the docs live in a checkout of the repository; pass --root CHECKOUT")
    if not (root / "docs").is_dir():
        raise ValueError(f"{root} holds no docs/ folder: is it a checkout of lenscope?")
    if args.check:
        stale = check(root)
        for found in stale:
            print(f"out of date: {found}", file=sys.stderr)
        if stale:
            print(f"{len(stale)} file(s) disagree with data/: run `{RENDER_COMMAND}`", file=sys.stderr)
            return 1
        print("every rendered table agrees with data/")
        return 0
    changed = write(root)
    print("\n".join(f"rendered {p.relative_to(root)}" for p in changed) or "every rendered table was up to date")
    return 0
