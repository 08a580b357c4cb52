"""Shared fixtures: no test reads beside the repository, an isolated store per test, the real embedded model once
per session, and a live ``streamlit run`` server with a Playwright-driven Chromium for browser tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from lenscope.benchmarks.browser import CHROMIUM, CHROMIUM_ARGS, launch_streamlit
from tests import repository_boundary

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"

repository_boundary.install()


@pytest.fixture(autouse=True)
def reads_inside_the_repository():
    """Fail any test that opened or listed a path beside the repository (``../shared``): a user's clone has none."""
    start = len(repository_boundary.touched)
    yield
    outside = repository_boundary.touched[start:]
    del repository_boundary.touched[start:]
    if outside:
        pytest.fail(f"the test read outside the repository, which a user's clone does not have: {sorted(set(outside))}")


@pytest.fixture(autouse=True)
def benchmark_records_aside(tmp_path_factory, monkeypatch):
    """A benchmark a test runs records its figures in a temporary folder, never over the shipped data/benchmarks."""
    monkeypatch.setenv("LENSCOPE_BENCHMARK_RECORDS", str(tmp_path_factory.mktemp("benchmark-records")))


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """A fresh LENSCOPE_DATA_DIR (SQLite + tensors) for one test."""
    path = tmp_path / "lenscope-data"
    monkeypatch.setenv("LENSCOPE_DATA_DIR", str(path))
    monkeypatch.delenv("LENSCOPE_DB_URL", raising=False)
    return path


@pytest.fixture
def store(data_dir):
    """An empty store in the test's data dir."""
    from lenscope.store.store import Store

    return Store()


@pytest.fixture(scope="session")
def target():
    """The real embedded SmolLM2-135M-Instruct, loaded once for the whole session."""
    import torch

    from lenscope.models.target import TargetModel

    torch.manual_seed(0)
    return TargetModel.load()


@pytest.fixture(scope="session")
def server_data_dir(tmp_path_factory) -> Path:
    """LENSCOPE_DATA_DIR of the live streamlit server (browser tests may seed its store)."""
    return tmp_path_factory.mktemp("server-data")


@pytest.fixture(scope="session")
def streamlit_server(tmp_path_factory, server_data_dir):
    """``streamlit run app.py`` on a free localhost port with its own data dir; yields the base URL."""
    yield from launch_streamlit(server_data_dir, tmp_path_factory.mktemp("server-log"))


@pytest.fixture(scope="session")
def starter_server(tmp_path_factory):
    """A second live server on a fresh data dir whose starter button runs the tiny study."""
    yield from launch_streamlit(tmp_path_factory.mktemp("starter-data"), tmp_path_factory.mktemp("starter-log"),
                                LENSCOPE_STARTER_SIZE="tiny")


@pytest.fixture
def fresh_server(tmp_path_factory):
    """A live server on an empty data dir: a fresh clone's first open."""
    yield from launch_streamlit(tmp_path_factory.mktemp("fresh-data"), tmp_path_factory.mktemp("fresh-log"))


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright (never downloads a browser)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (see .ci/run)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


@pytest.fixture
def page(browser):
    """A fresh browser page; screenshots go to test-artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield context.new_page()
    context.close()


MODEL_FIXTURES = {"target"}
BROWSER_FIXTURES = {"browser", "page", "streamlit_server", "starter_server", "fresh_server"}


def pytest_collection_modifyitems(config, items) -> None:
    """Mark tests by what they need (``-m "not model and not browser"`` is the fast part): ``model`` for the
    real target model, ``browser`` for Chromium against a live server (both also set by hand where a test loads
    a model itself)."""
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if needs & MODEL_FIXTURES:
            item.add_marker(pytest.mark.model)
        if needs & BROWSER_FIXTURES:
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def no_shipped_results(tmp_path, monkeypatch) -> None:
    """A copy of lenscope without the study's shipped results (data/results): the bare empty state."""
    monkeypatch.setattr("lenscope.jobs.study.shipped.RESULTS_DIR", tmp_path / "no-results")
