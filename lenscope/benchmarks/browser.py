"""A live ``streamlit run app.py`` server and concurrent Chromium sessions driving it (Playwright), shared by
the browser tests and the pages benchmark's load run."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"]
RUN_CAPTION = re.compile(r"Run #(\d+) ·")
SIMULATION_DONE = "End-to-end latency P99 by request class"
POLL_S = 0.2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    """Wait until the Streamlit server at ``url`` answers its health check; fail when ``proc`` exits first."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the app's server exited before it was up") from None
            time.sleep(0.5)
    raise TimeoutError(f"the app was not up after {timeout_s:.0f} s")


def settle(page, timeout_s: float = 180) -> None:
    """Wait until Streamlit has finished running the page's script (no status widget for 1.5 s)."""
    page.locator("h1").first.wait_for(timeout=timeout_s * 1000)
    deadline, quiet_since = time.time() + timeout_s, None
    while time.time() < deadline:
        if page.locator('[data-testid="stStatusWidget"]').count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since > 1.5:
            return
        time.sleep(0.25)
    raise TimeoutError("the page kept running")


def launch_streamlit(data_dir: Path, log_dir: Path, **extra_env: str) -> Iterator[str]:
    """Start ``streamlit run app.py`` on ``data_dir``; yields its base URL, stops it afterwards."""
    port = free_port()
    env = {**os.environ, "LENSCOPE_DATA_DIR": str(data_dir), **extra_env}
    env.pop("LENSCOPE_DB_URL", None)
    log = open(log_dir / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120)
    except (RuntimeError, TimeoutError) as exc:
        proc.kill()
        raise RuntimeError(f"{exc}; see {log.name}") from None
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@dataclass
class Session:
    """One browser session's interactions: its prompt, the run its page showed, seconds per interaction, and
    any error the page showed."""

    prompt: str
    run_id: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _page_errors(page) -> list[str]:
    """Texts of the error boxes and exception blocks on a page."""
    return [e.inner_text() for e in page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
            .all()]


def _wait_all(pages, ready, timeout_s: float) -> list[float]:
    """Poll every page until ``ready(page)``; the seconds each took from now (all interactions run at once)."""
    start, done = time.perf_counter(), {}
    while len(done) < len(pages):
        for k, page in enumerate(pages):
            if k not in done and ready(page):
                done[k] = time.perf_counter() - start
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"{len(pages) - len(done)} of {len(pages)} sessions did not finish in {timeout_s} s")
        time.sleep(POLL_S)
    return [done[k] for k in range(len(pages))]


def _interact(pages, sessions: list[Session], name: str, button: str, done: str | re.Pattern,
              timeout_s: float) -> None:
    """Click ``button`` on every page at once, then time each page until it shows ``done`` or an error."""
    for page in pages:
        page.get_by_role("button", name=button).click()
    waits = _wait_all(pages, lambda p: p.get_by_text(done).count() > 0 or bool(_page_errors(p)), timeout_s)
    for session, page, seconds in zip(sessions, pages, waits):
        session.seconds[name] = seconds
        session.errors += _page_errors(page)


def drive_sessions(browser, url: str, prompts: list[str], max_new_tokens: int = 16, first_n: int = 0,
                   timeout_s: float = 600.0) -> list[Session]:
    """One browser session per prompt, all at once: each generates its prompt on the Token entropy page, then
    replays the default trace (its first ``first_n`` requests; 0: all) on the Scheduler playground; returns what
    each saw and how long each interaction took."""
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in prompts]
    pages = [ctx.new_page() for ctx in contexts]
    sessions = [Session(prompt) for prompt in prompts]
    try:
        for page, prompt in zip(pages, prompts):
            page.goto(f"{url}/Token_entropy", timeout=120_000)
            page.get_by_label("Prompt").wait_for(timeout=300_000)
            page.get_by_label("Prompt").fill(prompt)
            page.get_by_label("Max new tokens").fill(str(max_new_tokens))
        _interact(pages, sessions, "generate", "Generate", RUN_CAPTION, timeout_s)
        for session, page in zip(sessions, pages):
            caption = page.get_by_text(RUN_CAPTION)
            if caption.count():
                session.run_id = int(RUN_CAPTION.search(caption.first.inner_text()).group(1))
        for page in pages:
            page.goto(f"{url}/Scheduler_playground", timeout=120_000)
            page.get_by_role("button", name="Run simulation").wait_for(timeout=300_000)
            if first_n:
                page.get_by_text("Filters and re-timing").click()
                page.get_by_label("First N requests (0 = all)").fill(str(first_n))
                page.get_by_label("First N requests (0 = all)").press("Enter")
                page.get_by_text(f"{first_n:,} requests over").wait_for(timeout=300_000)
        _interact(pages, sessions, "replay", "Run simulation", SIMULATION_DONE, timeout_s)
    finally:
        for ctx in contexts:
            ctx.close()
    return sessions
