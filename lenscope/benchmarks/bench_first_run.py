"""A new user's first ten minutes, timed end to end: fresh clone, `make run`, one click, every page filled.

The committed HEAD is cloned into a temporary folder and `make run` starts there with a new virtual environment,
an empty pip and model-conversion cache (``XDG_CACHE_HOME`` points into the folder) and an empty data dir, so
every package is downloaded and installed as on a new machine. Chromium (Playwright) then opens the home page,
waits for the starter button (model loaded), clicks it, waits for the study to finish and opens every page,
failing on any exception or empty state. Prints the time of each phase from the `make run` command on; the
last line is the total against the ten-minute target.

Usage: python -m lenscope benchmark first_run [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lenscope.benchmarks.browser import CHROMIUM, CHROMIUM_ARGS, REPO, free_port, settle, wait_healthy
from lenscope.benchmarks.records import Number, Numbers

PAGES = ("Token_entropy", "Attribution", "Remaining_length", "Pooling_ablation", "Drafter_vs_target",
         "Scheduler_playground", "Results")
TARGET_S = 600
KEYS = {"`make run`: packages installed, app up": "app_up_s",
        "home page shows the starter button (model loaded)": "starter_button_s",
        "starter study finished": "starter_study_finished_s",
        "every page opened with data, no exception": "pages_filled_s"}  # figure names of the phases


def drive(url: str, marks: dict[str, float], start: float) -> None:
    """Click the starter study and open every page; records the time of each phase in ``marks``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, timeout=300_000)
        button = page.get_by_role("button", name="Run the starter study")
        button.wait_for(timeout=600_000)
        marks["home page shows the starter button (model loaded)"] = time.perf_counter() - start
        button.click()
        page.get_by_text("finished in").first.wait_for(timeout=1_800_000)
        marks["starter study finished"] = time.perf_counter() - start
        for path in PAGES:
            page.goto(f"{url}/{path}", timeout=300_000)
            settle(page, 300)
            errors = page.locator('[data-testid="stException"]').count()
            empty = page.get_by_text("No dataset in the store yet").count()
            if errors or empty:
                raise RuntimeError(f"page {path}: {errors} exception(s), {empty} empty state(s)")
        marks["every page opened with data, no exception"] = time.perf_counter() - start
        browser.close()


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone, its venv and logs")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="lenscope-first-run-"))
    clone, venv, port = root / "lenscope", root / "venv", free_port()
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(clone)], check=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache"), "LENSCOPE_DATA_DIR": str(root / "data"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("LENSCOPE_DB_URL", None)
    url, marks = f"http://127.0.0.1:{port}", {}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log = open(root / "make-run.log", "w")
    proc = subprocess.Popen(["make", "run", f"PYTHON={venv / 'bin' / 'python'}", f"PORT={port}"], cwd=clone,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(url, proc, timeout_s=1200)
        marks["`make run`: packages installed, app up"] = time.perf_counter() - start
        drive(url, marks, start)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
        log.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("| phase (from `make run` on a fresh clone, empty caches) | minutes:seconds |")
    print("|---|---|")
    for phase, seconds in marks.items():
        print(f"| {phase} | {int(seconds // 60)}:{seconds % 60:04.1f} |")
    total = marks["every page opened with data, no exception"]
    print(f"fresh clone to filled pages: {int(total // 60)} min {total % 60:.0f} s "
          f"({total / TARGET_S:.2f}x the 10-minute target)")
    return ({KEYS[phase]: Number(seconds, "s", f"from `make run` on a fresh clone: {phase}")
             for phase, seconds in marks.items()}
            | {"vs_target": Number(total / TARGET_S, "x", "fresh clone to filled pages over the 10-minute target")})
