"""Interaction latency of every page on the current store (cached runs and trained predictors).

Each page is run once through Streamlit's AppTest to warm the process caches (model weights, store),
then re-run ``--repeats`` times, which is what a widget interaction costs. Prints the median seconds
per interaction and its ratio to the 1-second target.

``--sessions N`` then starts a live server on the same store and drives N Chromium sessions at once, each
generating a fresh prompt (Token entropy) and replaying a trace (Scheduler playground); it prints the median
and slowest seconds per interaction across sessions and any error a page showed.

Usage: LENSCOPE_DATA_DIR=cache/data python -m lenscope benchmark pages [--repeats 3] [--sessions 8]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from lenscope.benchmarks.records import Number, Numbers
from lenscope.benchmarks.timing import median_seconds

REPO = Path(__file__).resolve().parents[2]
TARGET_S = 1.0


def figure_name(page: Path) -> str:
    """``pages/3_Remaining_length.py`` -> ``remaining_length_s``; ``app.py`` -> ``home_s``."""
    return ("home" if page.stem == "app" else re.sub(r"^\d+_", "", page.stem).lower()) + "_s"


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pages", action=argparse.BooleanOptionalAction, default=True,
                        help="time every page through AppTest (--no-pages: only the browser sessions)")
    parser.add_argument("--sessions", type=int, default=0, help="concurrent browser sessions on a live server")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="tokens each session generates")
    args = parser.parse_args(argv)
    pages = [REPO / "app.py", *sorted((REPO / "pages").glob("*.py"))] if args.pages else []
    numbers: Numbers = {}
    if pages:
        print(f"{'page':32s} {'s / interaction':>16s} {'vs 1 s target':>14s}")
    for page in pages:
        app = AppTest.from_file(str(page), default_timeout=600)
        app.run()
        if app.exception:
            print(f"{page.stem:32s} {'error':>16s}  {app.exception[0].value[:60]}")
            numbers[figure_name(page)] = Number(None, "s", f"page {page.stem}: an exception, not timed")
            continue
        seconds = median_seconds(app.run, args.repeats, warmup=0)
        print(f"{page.stem:32s} {seconds:16.3f} {seconds / TARGET_S:13.2f}x")
        numbers[figure_name(page)] = Number(seconds, "s", f"page {page.stem}: median seconds per interaction over "
                                                          f"{args.repeats} reruns (target {TARGET_S:g} s)")
    if args.sessions:
        numbers |= load_run(args.sessions, args.max_new_tokens)
    return numbers


def load_run(n: int, max_new_tokens: int) -> Numbers:
    """N concurrent browser sessions on a live server over the current store: seconds per interaction."""
    from playwright.sync_api import sync_playwright

    from lenscope.benchmarks.browser import CHROMIUM, CHROMIUM_ARGS, drive_sessions, launch_streamlit
    from lenscope.store.settings import get_settings
    from lenscope.store.store import Store

    nonce = time.strftime("%H%M%S")  # fresh prompts: a generation, not a cache hit
    prompts = [f"Session {k} ({nonce}): describe a place you like." for k in range(n)]
    with tempfile.TemporaryDirectory() as logs, sync_playwright() as pw:
        server = launch_streamlit(get_settings().data_dir, Path(logs))
        url = next(server)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            sessions = drive_sessions(browser, url, prompts, max_new_tokens)
        finally:
            browser.close()
            server.close()
    print(f"\n{n} concurrent browser sessions ({max_new_tokens} new tokens each, then a trace replay)")
    print(f"{'interaction':32s} {'median s':>10s} {'slowest s':>10s}")
    numbers: Numbers = {}
    for name in ("generate", "replay"):
        times = [s.seconds[name] for s in sessions]
        print(f"{name:32s} {statistics.median(times):10.1f} {max(times):10.1f}")
        of = f"{name} over {n} concurrent browser sessions"
        numbers |= {f"sessions_{name}_median_s": Number(statistics.median(times), "s", f"median seconds to {of}"),
                    f"sessions_{name}_slowest_s": Number(max(times), "s", f"slowest seconds to {of}")}
    errors = [e for s in sessions for e in s.errors]
    store = Store()
    mixed = sum(s.run_id is None or store.load_run(s.run_id, layers=[]).prompt != s.prompt for s in sessions)
    print(f"errors shown: {len(errors)}; sessions that did not show their own run: {mixed}")
    return numbers | {"sessions_errors": Number(len(errors), "errors", "errors the sessions' pages showed"),
                      "sessions_mixed_up": Number(mixed, "sessions", "sessions that did not show their own run")}


if __name__ == "__main__":
    main()
