"""Results: every predictor in the store on the same runs, by scenario, each number traceable to its runs."""

import streamlit as st

from lenscope.app.docs import docs_link
from lenscope.app.results import inspect_cell, load_frame, picked_cell, train_panel
from lenscope.app.study import (
    claims_section,
    dataset_picker,
    picked_shipped,
    report_button,
    shipped_notice,
    study_results,
)
from lenscope.app.widgets import download_table, get_store, show_figure, show_table
from lenscope.figures.results import comparison_table, length_cdf_figure, mae_bars
from lenscope.jobs.results.leaderboard import ALL, length_cdfs, paired_vs_reference, score_matrix, score_table, select

TRAIN_HINT = ("`python -m lenscope train-baselines --dataset {d}` (SSJF-Reg/MC, S3, TRAIL, PiA, LTR), "
              "`train-egtp` / `train-plp --dataset {d}` (EGTP, PLP), `train-drafter` / `train-probe --dataset {d}` "
              "(OUTLETS drafter, target probe)")

st.set_page_config(page_title="Results · lenscope", layout="wide")
st.title("Results")
st.caption("Every length predictor in the store, judged on the same runs of one dataset: step 0 before decoding, "
           "later steps the remaining length.")
docs_link("guide/results")
store = get_store()
dataset = dataset_picker(store)
if dataset is None:
    st.stop()
shipped = picked_shipped(store, dataset)
if shipped is not None:
    shipped_notice(store, shipped)
    st.subheader("The papers' claims, cross-validated")
    claims_section(shipped)
    report_button(shipped)
    frame = shipped.results_frame()
    st.caption("Below: the predictors trained on the study's train split, on its test runs (censored runs left out; "
               "steps 0-32).")
else:
    include_censored = st.sidebar.checkbox("Include censored runs", key="results_censored",
                                           help="Runs cut at the token cap have no true length and are left out of "
                                                "scoring by default; tick to score them against the cap.")
    train_panel(store, dataset)
    report_button(study_results(store, dataset))
    try:
        frame = load_frame(store, dataset, include_censored)
    except ValueError as exc:
        st.info(str(exc))
        st.stop()
if frame.empty or (frame["family"] == "reference").all():
    st.info(f"No predictor trained on dataset {dataset!r} yet. Train some with the button above or "
            + TRAIN_HINT.format(d=dataset) + ".")
    st.stop()

splits = [s for s in ("test", "val", "train") if s in set(frame["split"])] + ["all"]
split = st.sidebar.selectbox("Split", splits, help="prompt-level split the numbers are computed on")
steps = sorted(int(s) for s in frame["step"].unique())
step = st.sidebar.selectbox("Decoding step", steps, help="0 = before decoding; t = after t generated tokens")
rows = select(frame, None if split == "all" else split, step)
if rows.empty:
    st.warning(f"No predictions on split {split!r} at step {step}.")
    st.stop()
scores = score_table(rows)
mae = score_matrix(scores, "mae")

st.subheader(f"MAE (tokens) on {split}, step {step}")
st.caption("Select a cell (predictor x scenario) or a row to list the predictions behind it.")
shown_mae = mae.round(1).assign(runs=score_matrix(scores, "n")[ALL].astype(int))
event = show_table(shown_mae, f"mae-{dataset}-{split}-step{step}", key="mae_table", on_select="rerun",
                   selection_mode=["single-cell", "single-row"])
picked = picked_cell(event.selection, mae)
if picked is not None and picked != st.session_state.get("last_pick"):
    st.session_state["last_pick"] = picked
    st.session_state["inspect_predictor"], st.session_state["inspect_scenario"] = picked
st.caption("`runs`: predictions behind the `all` column (a predictor trained on an older snapshot of a growing "
           "dataset covers fewer runs; retrain it to compare on the same runs).")
download_table(scores, f"results-{dataset}-{split}-step{step}", key="dl_scores", what="Every score")
st.subheader("Against the constant reference, with 95% CIs")
st.caption("MAE with its bootstrap CI over prompts, and the paired difference to the constant train median of this "
           "step on the same runs (negative: better; a CI that excludes 0 is supported by these runs).")
show_table(comparison_table(scores, paired_vs_reference(rows)), f"vs-constant-{dataset}-{split}-step{step}",
           hide_index=True)

bars_tab, tau_tab, cdf_tab = st.tabs(["MAE bars", "Kendall tau", "Length CDFs"])
with bars_tab:
    fig = mae_bars(scores, "mae")
    show_figure(fig, f"mae-{dataset}", key="bars")
with tau_tab:
    st.caption("Rank correlation of predicted and true lengths (what a shortest-job-first scheduler needs).")
    show_table(score_matrix(scores, "kendall_tau").round(3), f"kendall-tau-{dataset}-{split}-step{step}")
    fig = mae_bars(scores, "kendall_tau")
    show_figure(fig, f"kendall-{dataset}", key="tau")
with cdf_tab:
    fig = length_cdf_figure(length_cdfs(rows))
    show_figure(fig, f"cdf-{dataset}", key="cdf")

if shipped is None:
    st.subheader("Inspect a cell")
    inspect_cell(store, frame, rows, list(mae.index), list(mae.columns), ALL)
