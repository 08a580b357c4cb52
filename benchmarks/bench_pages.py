"""Interaction latency of every page on the current store (cached runs and trained predictors).

Each page is run once through Streamlit's AppTest to warm the process caches (model weights, store),
then re-run ``--repeats`` times, which is what a widget interaction costs. Prints the median seconds
per interaction and its ratio to the 1-second target.

Usage: LENSCOPE_DATA_DIR=cache/data python -m lenscope benchmark pages [--repeats 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from streamlit.testing.v1 import AppTest

from benchmarks.timing import median_seconds

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 1.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    pages = [REPO / "app.py", *sorted((REPO / "pages").glob("*.py"))]
    print(f"{'page':32s} {'s / interaction':>16s} {'vs 1 s target':>14s}")
    for page in pages:
        app = AppTest.from_file(str(page), default_timeout=600)
        app.run()
        if app.exception:
            print(f"{page.stem:32s} {'error':>16s}  {app.exception[0].value[:60]}")
            continue
        seconds = median_seconds(app.run, args.repeats, warmup=0)
        print(f"{page.stem:32s} {seconds:16.3f} {seconds / TARGET_S:13.2f}x")


if __name__ == "__main__":
    main()
