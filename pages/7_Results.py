"""Results: every predictor in the store on the same runs, by scenario, each number traceable to its runs."""

import streamlit as st

from analysis.benchmark import (
    ALL,
    cell_rows,
    length_cdfs,
    pred_true_histogram,
    run_rows,
    score_matrix,
    score_table,
    select,
)
from lenscope.baseline_jobs import (
    BASELINES,
    DESCRIPTIONS,
    benchmark_frame,
    train_baselines,
)
from lenscope.figures.results import (
    export_format,
    figure_bytes,
    length_cdf_figure,
    mae_bars,
    pred_true_heatmap,
)
from lenscope.ui import MODEL_KEY, dataset_picker, get_store, get_target, run_job

TRAIN_HINT = ("`python -m lenscope train-baselines --dataset {d}` (SSJF-Reg/MC, S3, TRAIL, PiA, LTR), "
              "`train-egtp` / `train-plp --dataset {d}` (EGTP, PLP), `train-drafter` / `train-probe --dataset {d}` "
              "(OUTLETS drafter, target probe)")


@st.cache_data(show_spinner="Reading predictions from the store...", max_entries=8)
def load_frame(dataset: str, signature: tuple):
    """Benchmark frame of ``dataset``; ``signature`` (store URL, predictor ids, run count) keys the cache."""
    return benchmark_frame(get_store(), dataset)


def keep_valid(key: str, options: list) -> None:
    """Forget a widget value that is no longer among its options (e.g. after changing the split)."""
    if key in st.session_state and st.session_state[key] not in options:
        del st.session_state[key]


def download_figure(fig, name: str, key: str) -> None:
    ext, mime = export_format()
    st.download_button(f"Download {ext.upper()}", data=lambda: figure_bytes(fig), file_name=f"{name}.{ext}",
                       mime=mime, key=key, on_click="ignore")


def train_panel(store, dataset: str) -> None:
    with st.expander("Train baselines on this dataset"):
        chosen = st.multiselect("Baselines", BASELINES, default=[b for b in BASELINES if b != "pia"],
                                format_func=lambda b: f"{b}: {DESCRIPTIONS[b]}")
        st.caption("PiA asks the target model (sidebar model of the home page, embedded default otherwise). "
                   f"CLI: `python -m lenscope train-baselines --dataset {dataset} --only {','.join(chosen)}`.")
        if st.button("Train selected baselines", disabled=not chosen):
            def baselines_job(on_progress):
                target = get_target(st.session_state.get(MODEL_KEY, "").strip()) if "pia" in chosen else None
                return train_baselines(store, dataset, chosen, target, on_progress=on_progress)

            done = run_job(baselines_job)
            if done:
                st.success("Trained " + ", ".join(r.name for r in done))


st.set_page_config(page_title="Results · lenscope", layout="wide")
st.title("Results")
st.caption("Every length predictor in the store, judged on the same runs of one dataset. Step 0 is the "
           "whole output length predicted before decoding (static predictors); later steps are remaining "
           "lengths of dynamic predictors (PLP, drafter, probe). On RL-style data each sample of a prompt is "
           "its own run, so static predictors are judged against every sample.")
store = get_store()
dataset = dataset_picker(store)
if dataset is None:
    st.stop()
train_panel(store, dataset)
predictors = store.predictors_frame()
signature = (store.url, tuple(predictors["predictor_id"]), len(store.runs_frame(dataset)))
try:
    frame = load_frame(dataset, signature)
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
event = st.dataframe(shown_mae, key="mae_table", on_select="rerun", selection_mode=["single-cell", "single-row"])
picked = None
if event.selection.cells:
    r, column = event.selection.cells[0]
    picked = (mae.index[int(r)], column)
elif event.selection.rows:
    picked = (mae.index[int(event.selection.rows[0])], ALL)
if picked is not None and picked != st.session_state.get("last_pick"):
    st.session_state["last_pick"] = picked
    st.session_state["inspect_predictor"], st.session_state["inspect_scenario"] = picked
st.caption("`runs`: predictions behind the `all` column (a predictor trained on an older snapshot of a growing "
           "dataset covers fewer runs; retrain it to compare on the same runs).")
st.download_button("Download table (CSV)", scores.to_csv(index=False), f"results-{dataset}-{split}-step{step}.csv",
                   "text/csv", key="dl_scores")

bars_tab, tau_tab, cdf_tab = st.tabs(["MAE bars", "Kendall tau", "Length CDFs"])
with bars_tab:
    fig = mae_bars(scores, "mae")
    st.plotly_chart(fig, key="bars")
    download_figure(fig, f"mae-{dataset}", "dl_bars")
with tau_tab:
    st.caption("Rank correlation of predicted and true lengths (what a shortest-job-first scheduler needs).")
    st.dataframe(score_matrix(scores, "kendall_tau").round(3))
    fig = mae_bars(scores, "kendall_tau")
    st.plotly_chart(fig, key="tau")
    download_figure(fig, f"kendall-{dataset}", "dl_tau")
with cdf_tab:
    fig = length_cdf_figure(length_cdfs(rows))
    st.plotly_chart(fig, key="cdf")
    download_figure(fig, f"cdf-{dataset}", "dl_cdf")

st.subheader("Inspect a cell")
names, scenarios = list(mae.index), list(mae.columns)
keep_valid("inspect_predictor", names)
keep_valid("inspect_scenario", scenarios)
st.session_state.setdefault("inspect_scenario", ALL)
c1, c2 = st.columns(2)
predictor = c1.selectbox("Predictor", names, key="inspect_predictor")
scenario = c2.selectbox("Scenario", scenarios, key="inspect_scenario")
cell = cell_rows(rows, predictor, scenario)
if cell.empty:
    st.info(f"{predictor} has no predictions for scenario {scenario!r} here.")
    st.stop()
st.markdown(f"**{predictor}**, {scenario}: MAE **{cell['abs_error'].mean():.1f}** tokens over {len(cell)} "
            f"predictions (select a row to open its run).")
shown = cell[["run_id", "prompt_id", "scenario", "split", "step", "predicted", "true", "abs_error"]].round(1)
pick = st.dataframe(shown, key="cell_table", on_select="rerun", selection_mode="single-row", hide_index=True)
st.download_button("Download these predictions (CSV)", shown.to_csv(index=False),
                   f"predictions-{predictor.replace(':', '-')}-{scenario}.csv", "text/csv", key="dl_cell")
fig = pred_true_heatmap(*pred_true_histogram(cell["predicted"], cell["true"]), f"{predictor}: predicted vs true")
st.plotly_chart(fig, key="heatmap")
download_figure(fig, f"heatmap-{predictor.replace(':', '-')}", "dl_heatmap")

run_ids = [int(r) for r in cell["run_id"].unique()]
if pick.selection.rows:
    st.session_state["inspect_run"] = int(shown["run_id"].iloc[int(pick.selection.rows[0])])
keep_valid("inspect_run", run_ids)
run_id = st.selectbox("Open run", run_ids, key="inspect_run")
run = store.load_run(run_id, layers=[])
st.markdown(f"Run **{run.id}** (prompt {run.prompt_id}): prompt {run.prompt_len} tokens, true output length "
            f"**{run.output_length}** tokens, {'finished' if run.finished else 'cut at max_new_tokens'}, "
            f"settings {run.settings}.")
p_col, r_col = st.columns(2)
p_col.text_area("Prompt", run.prompt, height=220, disabled=True, key=f"prompt_{run.id}")
r_col.text_area("Response", run.response, height=220, disabled=True, key=f"response_{run.id}")
st.caption("All predictions for this run (every predictor, every stored step):")
st.dataframe(run_rows(frame, run_id)[["predictor", "family", "step", "predicted", "true", "split"]].round(1),
             hide_index=True)
