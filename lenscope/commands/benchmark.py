"""``lenscope benchmark NAME [ARGS...]``: run one of the scripts in ``benchmarks/``."""

from __future__ import annotations

import argparse
import runpy
import sys

from lenscope.settings import REPO_ROOT

BENCH_DIR = REPO_ROOT / "benchmarks"


def available() -> list[str]:
    """Names of the benchmark scripts (``bench_<name>.py``)."""
    return sorted(p.stem.removeprefix("bench_") for p in BENCH_DIR.glob("bench_*.py"))


def register(subparsers) -> None:
    p = subparsers.add_parser("benchmark", help="run a benchmark script (ratios measured side by side)")
    p.add_argument("name", choices=available(), help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    script = BENCH_DIR / f"bench_{args.name}.py"
    sys.argv = [str(script), *args.args]
    runpy.run_path(str(script), run_name="__main__")
    return 0
