"""The Drafter-vs-target page: empty store, training from the page, charts, and a real browser."""

from __future__ import annotations

import pytest

from lenscope.app import widgets as ui
from lenscope.figures.drafter import umap_figure
from lenscope.jobs.drafter.training import train_drafter_job, train_probe_job
from lenscope.jobs.results.leaderboard import compare_predictors
from tests.apptest import open_page
from tests.unit.drafter.test_drafter import make_tiny_dataset

PAGE = "pages/5_Drafter_vs_target.py"


@pytest.fixture
def page_env(store, target, monkeypatch):
    """The page sees the test's store and the session's model (no second weight load)."""
    monkeypatch.setattr(ui, "get_store", lambda: store)
    monkeypatch.setattr(ui, "get_target", lambda spec, device="auto", dtype="float32": target)
    return store


def test_page_without_any_data_says_how_to_create_it(page_env, no_shipped_results):
    at = open_page(PAGE).run()
    assert not at.exception
    assert "starter study trains the OUTLETS drafter" in at.info[0].value
    assert any("Run the starter study" in i.value for i in at.info[1:])
    assert "Run the starter study" in [b.label for b in at.button]
    assert not at.get("plotly_chart")


def test_page_trains_from_buttons_then_shows_charts_and_curves(page_env, target, no_shipped_results):
    store = page_env
    make_tiny_dataset(store, target, "pagetiny")
    at = open_page(PAGE).run()
    assert not at.exception and "No drafter trained yet" in at.info[0].value
    at.number_input(key="train_epochs").set_value(1)
    at.button(key="train_drafter").click().run()
    assert not at.exception and not at.error
    assert any("drafter:pagetiny:outlets" in s.value for s in at.success)
    at.number_input(key="train_layer").set_value(15)
    at.button(key="train_probe").click().run()
    assert any("probe:pagetiny:L15:regression" in s.value for s in at.success)

    at = open_page(PAGE).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert set(table["name"]) == {"drafter:pagetiny:outlets", "probe:pagetiny:L15:regression"}
    assert {"static vs constant [95% CI]", "dynamic vs constant [95% CI]"} <= set(table.columns)
    ids = store.predictors_frame().set_index("name")["predictor_id"]
    expected = compare_predictors(store, int(ids["drafter:pagetiny:outlets"]),
                                  int(ids["probe:pagetiny:L15:regression"]))
    assert len(at.dataframe[1].value) == len(expected)     # drafter vs probe, paired on the same test runs
    assert len(at.get("plotly_chart")) == 1               # MAE by step
    infos = " ".join(i.value for i in at.info)
    assert "Not measured yet" in infos and "UMAP" in infos  # both offered by a button, not computed on opening

    at.slider(key="spec_prompts").set_value(4)
    at.slider(key="spec_tokens").set_value(16)
    at.button(key="spec_measure").click().run()
    assert not at.exception and not at.error
    table = at.dataframe[0].value                          # plain and speculative decoding, live
    assert table["decoding"].tolist()[0] == "plain (target only)" and len(table) == 2
    same, prompts = table["answers identical to plain"].iloc[1].split(" / ")
    assert same == prompts == str(table["prompts"].iloc[1])  # greedy: every answer is plain decoding's
    assert len(at.get("plotly_chart")) == 2               # + acceptance per position with CIs
    assert any("SD-only drafter" in c.value for c in at.caption)  # the no-loss claim needs it

    at.text_area(key="live_prompt").input("Name a planet.").run()
    at.slider(key="live_tokens").set_value(16)
    at.button(key="live_generate").click().run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 3               # + the live remaining-length curve
    assert any("verify passes" in c.value and "lossless" in c.value for c in at.caption)


def test_umap_figure_shows_both_representations():
    payload = {"drafter": [[0, 1], [1, 0]], "target": [[2, 2], [3, 1]], "remaining": [5, 1], "step": [0, 4],
               "layer": 15}
    fig = umap_figure(payload)
    assert [list(t.x) for t in fig.data] == [[0, 1], [2, 3]]
    assert list(fig.data[0].marker.color) == [5, 1]


def test_browser_shows_drafter_charts(streamlit_server, server_data_dir, page, target, monkeypatch):
    from lenscope.store.store import Store
    from tests.conftest import ARTIFACTS

    monkeypatch.setenv("LENSCOPE_DATA_DIR", str(server_data_dir))
    monkeypatch.delenv("LENSCOPE_DB_URL", raising=False)
    store = Store()
    make_tiny_dataset(store, target, "drafter-browser", n=3)
    train_drafter_job(store, target, "drafter-browser", "outlets", epochs=1, max_step=24, include_censored=True)
    train_probe_job(store, "drafter-browser", 15, epochs=3, max_step=24, include_censored=True)

    page.goto(f"{streamlit_server}/Drafter_vs_target", timeout=120_000)
    page.get_by_text("Dataset-wide MAE by decoding step").wait_for(timeout=180_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    page.get_by_text("all splits").click()
    page.get_by_text("Speculative decoding, live", exact=True).wait_for(timeout=60_000)
    page.get_by_role("button", name="Measure live speculative decoding").wait_for(timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "drafter_vs_target.png"), full_page=True)
