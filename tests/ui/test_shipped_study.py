"""A fresh clone with an empty store: every page opens on the shipped study's numbers (data/results), labelled as
such with the command that rebuilds them, and the starter study stays offered as the live demonstration."""

from __future__ import annotations

import time

import pytest

from lenscope.jobs.study.shipped import shipped_study
from tests.apptest import open_page

LABEL = "Shipped results of the 3,014-run study"
STORE_PAGES = {  # page -> what it must show of the study before any button is pressed
    "pages/2_Attribution.py": "plotly_chart",
    "pages/3_Remaining_length.py": "plotly_chart",
    "pages/4_Pooling_ablation.py": "plotly_chart",
    "pages/7_Results.py": "dataframe",
}


def _texts(at) -> str:
    return " ".join(e.value for kind in ("info", "markdown", "caption", "success") for e in at.get(kind)
                    if isinstance(e.value, str))


def test_the_shipped_files_match_their_manifest():
    study = shipped_study()
    assert study is not None and study.manifest["runs"] == 3014
    for name in study.manifest["files"]:  # each file's hash is checked as it is read
        assert (study.json(name) if ".json" in name else study.frame(name)) is not None, name
    claims = study.claims()
    assert {"claim", "difference", "lo", "hi", "verdict", "prompts"} <= set(claims["claims"][0])
    assert claims["config"]["folds"] >= 5 and claims["config"]["seeds"] >= 3


@pytest.mark.parametrize("page_file", STORE_PAGES)
def test_each_page_opens_on_the_shipped_study(data_dir, page_file):
    at = open_page(page_file).run()
    assert not at.exception
    assert LABEL in _texts(at) and "python -m lenscope study --size full" in _texts(at)
    assert at.get(STORE_PAGES[page_file]), page_file
    assert at.sidebar.selectbox[0].value == "study (shipped results)"
    assert "Run the starter study" in [b.label for b in at.button]  # the live demonstration stays one click away


def test_results_page_shows_the_claims_and_the_test_split_scores(data_dir):
    at = open_page("pages/7_Results.py").run()
    claims = at.dataframe[0].value
    assert "verdict" in claims and len(claims) >= 10
    verdicts = set(claims["verdict"].astype(str))
    assert {"reproduced", "direction reproduced, size ruled out", "check failed: above the constant"} <= verdicts
    assert "95% CI" in claims and "Holm-adjusted CI (level, family of 24)" in claims  # each interval's level
    assert "Verdicts: reproduced: the whole CI is below 0" in _texts(at)
    scores = at.dataframe[1].value
    assert "all" in scores.columns and scores["runs"].max() > 300


def test_a_study_in_the_store_replaces_the_shipped_one(store):
    from types import SimpleNamespace

    from lenscope.jobs.study.shipped import shipped_for

    assert shipped_for(store) is not None
    target = SimpleNamespace(key="k", source=SimpleNamespace(spec="embedded:smollm2-135m-instruct", gguf_file=""),
                             num_layers=30, hidden_size=576, dtype="float32")
    store.ensure_dataset("study", store.ensure_model(target), {"layers": [30]})
    assert shipped_for(store) is None
    at = open_page("pages/4_Pooling_ablation.py").run()
    assert "study (shipped results)" not in at.sidebar.selectbox[0].options


def test_without_shipped_results_pages_offer_the_starter_study(data_dir, no_shipped_results):
    at = open_page("pages/4_Pooling_ablation.py").run()
    assert not at.exception
    assert any("Run the starter study" in i.value for i in at.info)
    assert [b.label for b in at.button] == ["Run the starter study"]


def test_home_opens_on_the_tour_cards_with_whole_numbers_and_cis(data_dir, monkeypatch):
    """Each card shows its number whole and its intervals whole on a second line, each named by its level (st.metric
    and narrow headings cut them to "0.387 [..."), and what the number rests on; the home page runs as the
    navigation's default page."""
    from lenscope.jobs.study.tour import tour

    def no_model(*args, **kwargs):
        raise ValueError("no model in this test")

    monkeypatch.setattr("lenscope.app.widgets.get_target", no_model)  # the home page goes on without one
    at = open_page("app.py").run()
    assert not at.exception
    assert at.title[0].value == "lenscope"
    cards = [m.value for m in at.markdown if "font-size:1.75rem" in m.value]
    stops = [s for s in tour(shipped_study()) if s.value is not None]
    assert len(cards) == 5 and len(stops) >= 3
    for stop in stops:
        assert any(stop.number in card and stop.interval in card for card in cards), stop.title
        assert stop.interval.startswith("95% ") and stop.rests_on, stop.title
        assert f"Rests on {stop.rests_on}." in _texts(at), stop.title


def test_the_tour_cards_name_each_interval_and_what_they_rest_on():
    """The plain 95% CI beside the Holm-adjusted one (the verdict's), the within-run r first, the new labels, the
    drafter's epochs and the requests resampled from the runs."""
    from lenscope.jobs.study.tour import tour

    entropy, pooling, plp, drafter, scheduling = tour(shipped_study())
    assert entropy.number == "0.063" and entropy.interval == "95% CI [0.034, 0.098]"  # within runs first
    assert entropy.detail.startswith("within-run Pearson r")
    assert "raw r = 0.135 (95% CI [0.111, 0.163]), partly between-run: mean pooling" in entropy.detail
    assert "gets r = 0.096" in entropy.detail
    assert pooling.number == "-1.0"
    assert pooling.intervals == ("95% CI [-6.8, +4.0]", "Holm-adjusted 99.3% CI (family of 24) [-9.1, +5.4]")
    assert plp.verdict == "direction reproduced, size ruled out (on the Holm-adjusted CI)"
    assert "which is ruled out" in entropy.verdict and "positive control" in entropy.verdict
    assert drafter.intervals[1].startswith("Holm-adjusted 99.5% CI (family of 24) [")
    assert "the OUTLETS drafter trained 1 epoch on the train split" in drafter.rests_on
    assert "3 training seeds" in pooling.rests_on and "5-fold" in plp.rests_on
    assert "the OUTLETS drafter trained 1 epoch" in scheduling.rests_on
    assert "1,914 requests per seed resampled from 136 distinct test runs" in scheduling.rests_on
    assert scheduling.interval.startswith("95% t interval over 20 seeds [")


BROWSER_PAGES = {  # path -> (heading, a text of the shipped study the page shows before any button)
    "": ("lenscope", "Guided tour: the 3,014-run study (shipped results)"),
    "Token_entropy": ("Token entropy", "Length predictors shipped with lenscope"),
    "Attribution": ("Token attribution", LABEL),
    "Remaining_length": ("Remaining length (PLP)", LABEL),
    "Pooling_ablation": ("Pooling ablation", LABEL),
    "Drafter_vs_target": ("Drafter vs target", LABEL),
    "Scheduler_playground": ("Scheduler playground", "Short-request P99: "),
    "Results": ("Results", LABEL),
}


DATA = ('[data-testid="stDataFrame"], [data-testid="stPlotlyChart"], [data-testid="stMetric"], '
        '[data-testid="stTable"], [data-testid="stVegaLiteChart"], .tour-number')


def first_screen_data(page, timeout_s: float = 30) -> bool:
    """Whether a table, chart or metric shows within the first screen (the viewport, not scrolled), waiting up to
    ``timeout_s`` for it to be drawn."""
    height = page.viewport_size["height"]
    deadline = time.time() + timeout_s
    while True:
        if page.locator(DATA).evaluate_all(f"els => els.some(e => {{ const r = e.getBoundingClientRect(); "
                                           f"return r.height > 0 && r.top < {height} && r.bottom > 0; }})"):
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.5)


def cut_metrics(page) -> list[str]:
    """The texts of metric values and tour-card numbers that do not fit their box (shown with an ellipsis)."""
    return page.locator('[data-testid="stMetricValue"], [data-testid="stMetricValue"] *, .tour-number, '
                        '.tour-interval').evaluate_all(
        "els => els.filter(e => e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).textOverflow === 'ellipsis'"
        " || e.innerText.trim().endsWith('…')).map(e => e.innerText)")


@pytest.mark.model  # the home, Token entropy and Drafter pages load the embedded model
def test_browser_fresh_clone_opens_on_the_study_and_predicts_a_typed_prompt(fresh_server, page):
    from lenscope.benchmarks.browser import settle
    from tests.conftest import ARTIFACTS

    for path, (heading, shipped_text) in BROWSER_PAGES.items():
        page.goto(f"{fresh_server}/{path}", timeout=120_000)
        page.get_by_role("heading", name=heading).first.wait_for(timeout=180_000)
        page.get_by_text(shipped_text).first.wait_for(timeout=180_000)
        settle(page)
        links = page.locator('[data-testid="stSidebarNav"] a')  # Home first (not "app"), every page listed
        first = links.first.inner_text().split()  # its icon's name ("home"), then its label
        assert first[-1] == "Home" and "app" not in first and links.count() == len(BROWSER_PAGES) + 1, path  # + Docs
        assert page.locator('[data-testid="stException"]').count() == 0, path
        if path != "Drafter_vs_target":  # its "Your store" part below the study offers to train one
            assert page.get_by_text("No dataset in the store yet").count() == 0, path
        assert first_screen_data(page), f"{path}: no table, chart or metric on the first screen"
        assert cut_metrics(page) == [], f"{path}: metrics cut short"
        page.screenshot(path=str(ARTIFACTS / f"shipped_{path.lower() or 'home'}.png"), full_page=True)

    page.goto(f"{fresh_server}/Docs?page=study/index", timeout=120_000)  # the docs, offline, tables rendered
    page.get_by_role("heading", name="The study and its findings").first.wait_for(timeout=180_000)
    assert page.get_by_text("direction reproduced, size ruled out").count() > 0
    assert page.locator('[data-testid="stException"]').count() == 0

    page.goto(f"{fresh_server}/Token_entropy", timeout=120_000)
    box = page.get_by_label("Prompt")
    box.wait_for(timeout=180_000)
    box.fill("List three uses of a paperclip.")
    page.get_by_label("Max new tokens").fill("32")
    page.get_by_role("button", name="Generate").click()
    page.get_by_text("Predicted length, before the answer").first.wait_for(timeout=180_000)
    page.get_by_text("The answer has").first.wait_for(timeout=30_000)
    settle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(ARTIFACTS / "shipped_token_entropy_prediction.png"), full_page=True)


def test_a_changed_or_missing_results_file_is_refused_with_how_to_restore_it(tmp_path):
    import shutil

    from lenscope.jobs.study.shipped import RESULTS_DIR

    root = tmp_path / "results"
    shutil.copytree(RESULTS_DIR, root)
    claims = root / "claims.json"
    claims.write_text(claims.read_text().replace("reproduced", "Reproduced", 1))
    study = shipped_study(root)
    changed = "claims.json does not match the hash in its manifest .*git checkout data/results"
    with pytest.raises(ValueError, match=changed):
        study.claims()
    (root / "preset.json").unlink()
    with pytest.raises(ValueError, match="the shipped study's results lacks preset.json; restore it with"):
        study.preset()
    assert study.absent("PLP curve").endswith("rebuild it with `python -m lenscope study --size full`.")


def test_home_shows_the_shipped_tour_before_the_model_loads(data_dir, monkeypatch):
    """The tour needs no model: it is drawn first, and the model (about 40 s on a first run) loads afterwards."""
    import lenscope.app.study as study_widgets

    order: list[str] = []
    tour_cards = study_widgets.guided_tour

    def tour(*args, **kwargs):
        order.append("tour")
        return tour_cards(*args, **kwargs)

    def model(*args, **kwargs):
        order.append("model")
        raise ValueError("no model in this test")

    monkeypatch.setattr("lenscope.app.study.guided_tour", tour)
    monkeypatch.setattr("lenscope.app.widgets.get_target", model)
    at = open_page("app.py").run()
    assert not at.exception
    assert order == ["tour", "model"]
