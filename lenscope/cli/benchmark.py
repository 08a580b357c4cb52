"""``lenscope benchmark [--no-record] NAME [ARGS...]``: run a benchmark of ``lenscope/benchmarks/``
(``bench_NAME.main``) and write its record (:mod:`lenscope.benchmarks.records`)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

from lenscope import benchmarks
from lenscope.benchmarks.records import first_sentence, record_run, write_record

NO_RECORD = "--no-record"


def available() -> list[str]:
    """Names of the benchmark modules (``lenscope/benchmarks/bench_<name>.py``), with hyphens for underscores."""
    return sorted(m.name.removeprefix("bench_").replace("_", "-") for m in pkgutil.iter_modules(benchmarks.__path__)
                  if m.name.startswith("bench_"))


def benchmark_name(text: str) -> str:
    """A benchmark's name as :func:`available` spells it (``live_serving`` and ``live-serving`` are one)."""
    return text.replace("_", "-")


def register(subparsers) -> None:
    p = subparsers.add_parser("benchmark", help="run a benchmark script (ratios measured side by side) and record "
                                                "its figures")
    p.add_argument(NO_RECORD, dest="no_record", action="store_true",
                   help="write no record (also accepted after NAME)")
    p.add_argument("--records", type=Path, default=None,
                   help="folder of the record NAME.json (default: data/benchmarks of a checkout, else benchmarks in "
                        "the data dir; or $LENSCOPE_BENCHMARK_RECORDS)")
    p.add_argument("name", type=benchmark_name, choices=available(), help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run, interrupt_note="interrupted; the benchmark did not finish and wrote no results")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; unless told not to, write its record once it has finished (a failure writes none)."""
    argv = [a for a in args.args if a != NO_RECORD]
    module = importlib.import_module(f"lenscope.benchmarks.bench_{args.name.replace('-', '_')}")
    if args.no_record or NO_RECORD in args.args:
        module.main(argv)
        return 0
    record = record_run(args.name, module.main, argv, first_sentence(module.__doc__ or ""))
    path = write_record(record, args.records)
    print(f"benchmark record: {path}", file=sys.stderr)
    return 0
