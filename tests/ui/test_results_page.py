"""Results page: benchmark aggregation, figures, the page with and without data (AppTest), one browser check."""

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.data.prompts import PromptItem
from lenscope.analysis.results.leaderboard import (
    ALL,
    REFERENCE,
    cell_rows,
    constant_predictions,
    kendall_tau,
    length_cdfs,
    pred_true_histogram,
    score_matrix,
    score_table,
    select,
)
from lenscope.figures.results import (
    export_format,
    figure_bytes,
    length_cdf_figure,
    mae_bars,
    pred_true_heatmap,
)
from lenscope.jobs.runs.datasets import dataset_runs
from tests.apptest import open_page

PAGE = "pages/7_Results.py"


def seed_store(store, target, dataset: str = "bench") -> pd.DataFrame:
    """Eight real short runs (two scenarios) and three predictors with known errors:
    ``close`` (true + 2), ``flat`` (always 50) and a dynamic ``steps`` predictor (steps 0..2, exact)."""
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.models.engine import GenerationSettings

    prompts = [PromptItem(f"Count from one to {k + 1}.", "user", f"q{k}", "chat" if k % 2 else "reasoning")
               for k in range(8)]  # tasks q0..q7: 4 train, 2 val, 2 test
    collect_dataset(store, target, dataset, prompts, GenerationSettings(max_new_tokens=5, seed=0), layers=[])
    runs = dataset_runs(store, dataset, include_censored=True)  # 5-token answers: most hit the cap
    base = pd.DataFrame({"run_id": runs["run_id"], "step": 0, "true": runs["output_tokens"].astype(float),
                         "split": runs["split"]})
    did = store.dataset_id(dataset)
    for name, kind, frame in [
        (f"close:{dataset}", "baseline", base.assign(predicted=base["true"] + 2)),
        (f"flat:{dataset}", "egtp_static", base.assign(predicted=50.0)),
        (f"steps:{dataset}", "probe", pd.concat([base.assign(step=s, true=base["true"] - s, predicted=base["true"] - s)
                                                 for s in range(3)])),
    ]:
        pid = store.save_predictor(name, kind, {}, {}, dataset_id=did)
        store.save_predictions(pid, frame[["run_id", "step", "predicted", "true", "split"]])
    return runs


def synthetic_frame() -> pd.DataFrame:
    rows = []
    for i in range(12):
        scenario, split, true = ("chat", "long")[i % 2], ("train", "test")[i % 3 == 0], 10.0 * (i + 1)
        for name, pred in [("good", true + 1), ("bad", 60.0)]:
            rows.append({"predictor_id": 1, "predictor": name, "family": "baseline", "dataset": "d", "run_id": i,
                         "prompt_id": i, "scenario": scenario, "step": 0, "predicted": pred, "true": true,
                         "split": split})
    return pd.DataFrame(rows)


def test_scores_cells_and_histograms():
    frame = synthetic_frame()
    scores = score_table(select(frame, None))
    good = scores[(scores["predictor"] == "good") & (scores["scenario"] == ALL)].iloc[0]
    assert good["mae"] == 1.0 and good["n"] == 12 and good["kendall_tau"] == pytest.approx(1.0)
    matrix = score_matrix(scores)
    assert list(matrix.columns) == ["chat", "long", ALL] and list(matrix.index) == ["good", "bad"]
    cell = cell_rows(frame, "bad", "chat")
    assert len(cell) == 6 and cell["abs_error"].iloc[0] == cell["abs_error"].max()
    assert cell["abs_error"].mean() == pytest.approx(matrix.loc["bad", "chat"])
    counts, edges = pred_true_histogram(cell["predicted"], cell["true"], bins=5)
    assert counts.sum() == 6 and edges[0] == 0 and edges[-1] == 110
    assert np.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_constant_reference_and_cdfs():
    runs = pd.DataFrame({"run_id": [1, 2, 3, 4], "prompt_id": [1, 2, 3, 4], "scenario": "chat",
                         "output_tokens": [10, 30, 100, 7], "split": ["train", "train", "test", "val"]})
    ref = constant_predictions(runs)
    assert (ref["predicted"] == 20.0).all() and (ref["predictor"] == REFERENCE).all()
    cdfs = length_cdfs(ref)
    truth = cdfs[cdfs["series"] == "true length"]
    assert truth["length"].tolist() == [7, 10, 30, 100] and truth["cdf"].iloc[-1] == 1.0


def test_figures():
    frame = synthetic_frame()
    scores = score_table(frame)
    bars = mae_bars(scores)
    assert {t.name for t in bars.data} == {"good", "bad"} and list(bars.data[0].x) == ["chat", "long", ALL]
    heat = pred_true_heatmap(*pred_true_histogram(frame["predicted"], frame["true"], 4), "t")
    assert np.asarray(heat.data[0].z).sum() == len(frame)
    cdf = length_cdf_figure(length_cdfs(frame))
    assert cdf.data[0].name == "true length"
    ext, _ = export_format()
    data = figure_bytes(bars)
    assert data.startswith(b"\x89PNG") if ext == "png" else b"<html" in data[:200]


def test_page_without_dataset(data_dir, no_shipped_results):
    at = open_page(PAGE).run()
    assert not at.exception
    assert any("Run the starter study" in i.value for i in at.info)
    assert [b.label for b in at.button] == ["Run the starter study"]


def test_page_with_dataset_but_no_predictor(store, target, no_shipped_results):
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.models.engine import GenerationSettings

    collect_dataset(store, target, "empty", [PromptItem("Hi.", "user", "x")], GenerationSettings(3), layers=[])
    at = open_page(PAGE).run()
    assert not at.exception
    assert any("No predictor trained" in i.value and "train-baselines" in i.value for i in at.info)


def test_page_with_data_links_numbers_to_runs(store, target, no_shipped_results):
    runs = seed_store(store, target)
    at = open_page(PAGE).run()
    assert not at.exception, at.exception
    at.checkbox(key="results_censored").check().run()  # the runs are censored: the switch brings them back
    assert not at.exception, at.exception
    split = at.sidebar.selectbox[1].value
    table = at.dataframe[0].value
    assert set(table.index) == {"close:bench", "flat:bench", "steps:bench", REFERENCE}
    assert table.loc["close:bench", ALL] == pytest.approx(2.0)
    assert len(at.get("plotly_chart")) >= 3
    # the inspected cell lists its predictions with run ids; the default run is the worst one
    assert at.selectbox(key="inspect_predictor").value == table.index[0]  # best overall first
    assert table.loc["steps:bench", ALL] == 0.0
    # selecting a table cell (predictor x scenario) opens that cell below
    row = list(table.index).index("flat:bench")
    at.session_state["mae_table"] = {"selection": {"rows": [], "columns": [], "cells": [[row, ALL]]}}
    at.run()
    assert at.selectbox(key="inspect_predictor").value == "flat:bench"
    assert at.selectbox(key="inspect_scenario").value == ALL
    cell = at.dataframe[3].value
    in_split = runs[runs["split"] == split]
    assert sorted(cell["run_id"]) == sorted(in_split["run_id"])
    assert (cell["predicted"] == 50).all()
    expected = (in_split["output_tokens"] - 50).abs().mean()
    assert any(f"MAE **{expected:.1f}**" in m.value for m in at.markdown)
    run_id = int(in_split["run_id"].iloc[0])
    at.selectbox(key="inspect_run").set_value(run_id).run()
    prompt = runs.set_index("run_id").loc[run_id, "prompt"]
    assert at.text_area(key=f"prompt_{run_id}").value == prompt
    detail = at.dataframe[4].value
    assert set(detail["predictor"]) >= {"close:bench", "flat:bench", "steps:bench"}
    assert sorted(detail.loc[detail["predictor"] == "steps:bench", "step"]) == [0, 1, 2]
    # later decoding steps show dynamic predictors and the constant of that step (mean remaining length)
    at.sidebar.selectbox[2].set_value(2).run()
    assert not at.exception
    assert set(at.dataframe[0].value.index) == {"steps:bench", REFERENCE}


def test_browser_results_page(streamlit_server, server_data_dir, page, target):
    from lenscope.store.store import Store
    from tests.conftest import ARTIFACTS

    seed_store(Store(f"sqlite:///{server_data_dir / 'lenscope.db'}", server_data_dir / "tensors"), target, "browser")
    page.goto(f"{streamlit_server}/Results?dataset=browser", timeout=120_000)
    page.get_by_text("Include censored runs").click(timeout=180_000)  # the seeded 5-token runs hit the cap
    page.get_by_text("MAE (tokens) on").first.wait_for(timeout=180_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    page.get_by_role("tab", name="Length CDFs").click()
    page.get_by_text("Inspect a cell").wait_for(timeout=30_000)
    assert page.locator(".js-plotly-plot").count() >= 2
    page.screenshot(path=str(ARTIFACTS / "results.png"), full_page=True)
