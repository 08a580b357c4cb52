"""The first ten minutes: the starter study as a background job (progress, reattach after reload, errors),
and the whole first-run flow in a browser on a fresh store."""

from __future__ import annotations

import time

import pytest

from lenscope.app.background import get_job, start_job
from lenscope.benchmarks.browser import settle

PAGES = {"Token_entropy": "Token entropy", "Attribution": "Attribution", "Remaining_length": "Remaining length",
         "Pooling_ablation": "Pooling ablation", "Drafter_vs_target": "Drafter vs target",
         "Scheduler_playground": "Scheduler playground", "Results": "Results"}


def _wait(job, seconds: float = 10.0) -> None:
    deadline = time.time() + seconds
    while job.running and time.time() < deadline:
        time.sleep(0.01)
    assert not job.running


def test_background_job_reports_progress_then_its_result():
    release = []

    def job(on_progress):
        on_progress(1, 4, "step 1/2: collect · sampling | 12 tok/s")
        while not release:
            time.sleep(0.01)
        on_progress(3, 4, "step 2/2: train")
        return "trained"

    first = start_job("bg-test", job)
    deadline = time.time() + 5
    while first.done == 0 and time.time() < deadline:
        time.sleep(0.01)
    assert first.running and first.status_text().startswith("step 1/2: collect · sampling | 12 tok/s: 1/4")
    assert start_job("bg-test", lambda cb: "again") is first  # a running job is reattached, not restarted
    assert get_job("bg-test") is first
    release.append(True)
    _wait(first)
    assert first.result == "trained" and first.error is None and first.status_text().startswith("finished in")
    second = start_job("bg-test", lambda cb: "again")  # an ended job can run again
    _wait(second)
    assert second is not first and second.result == "again"


def test_background_job_error_is_kept_as_its_message():
    def job(on_progress):
        raise ValueError("dataset 'x' has too few runs")

    failed = start_job("bg-fail", job)
    _wait(failed)
    assert failed.error == "dataset 'x' has too few runs" and failed.result is None
    assert failed.status_text().startswith("failed after") and "too few runs" in failed.status_text()


@pytest.mark.model
def test_browser_starter_study_fills_every_page(starter_server, page):
    from tests.conftest import ARTIFACTS

    page.goto(starter_server, timeout=120_000)
    page.get_by_role("button", name="Run the starter study").click(timeout=180_000)
    page.get_by_text("step 1/").first.wait_for(timeout=60_000)
    page.reload()  # the study keeps running in the server and the page reattaches to it
    page.get_by_text("so far").first.wait_for(timeout=120_000)
    assert page.get_by_role("button", name="Run the starter study").count() == 0
    page.get_by_text("finished in").first.wait_for(timeout=900_000)
    settle(page)
    for card in ("1 · Entropy", "2 · Pooling", "3 · Remaining length", "4 · Drafter", "5 · Scheduling"):
        assert page.get_by_text(card).first.is_visible(), card
    assert page.get_by_text("— *to do*").count() == 0
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(ARTIFACTS / "starter_home.png"), full_page=True)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the study report (HTML)").last.click()  # the starter's
    report = download.value.path().read_text()
    assert report.startswith("<!DOCTYPE html>") and "The papers&#x27; claims" in report
    for path, title in PAGES.items():
        page.goto(f"{starter_server}/{path}", timeout=120_000)
        page.get_by_role("heading", name=title).first.wait_for(timeout=120_000)
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, path
        assert page.get_by_text("No dataset in the store yet").count() == 0, path
        page.screenshot(path=str(ARTIFACTS / f"starter_{path.lower()}.png"), full_page=True)
