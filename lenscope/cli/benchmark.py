"""``lenscope benchmark NAME [ARGS...]``: run a benchmark of ``lenscope/benchmarks/`` (``bench_NAME.main``)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from lenscope import benchmarks


def available() -> list[str]:
    """Names of the benchmark modules (``lenscope/benchmarks/bench_<name>.py``), with hyphens for underscores."""
    return sorted(m.name.removeprefix("bench_").replace("_", "-") for m in pkgutil.iter_modules(benchmarks.__path__)
                  if m.name.startswith("bench_"))


def benchmark_name(text: str) -> str:
    """A benchmark's name as :func:`available` spells it (``live_serving`` and ``live-serving`` are one)."""
    return text.replace("_", "-")


def register(subparsers) -> None:
    p = subparsers.add_parser("benchmark", help="run a benchmark script (ratios measured side by side)")
    p.add_argument("name", type=benchmark_name, choices=available(), help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run, interrupt_note="interrupted; the benchmark did not finish and wrote no results")


def run(args: argparse.Namespace) -> int:
    importlib.import_module(f"lenscope.benchmarks.bench_{args.name.replace('-', '_')}").main(list(args.args))
    return 0
