"""Results-page widgets: the baseline training panel, figure downloads and the cell / run inspector."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.app.runner import error_boundary, run_job
from lenscope.app.widgets import MODEL_KEY, get_target, show_figure, show_table
from lenscope.figures.results import pred_true_heatmap
from lenscope.jobs.predictors.baselines import BASELINES, DESCRIPTIONS, train_baselines
from lenscope.jobs.results.leaderboard import benchmark_frame, cell_rows, pred_true_histogram, run_rows
from lenscope.store.store import Store


@st.cache_data(show_spinner="Reading predictions from the store...", max_entries=8)
def _benchmark(_store: Store, url: str, dataset: str, include_censored: bool, signature: tuple) -> pd.DataFrame:
    return benchmark_frame(_store, dataset, include_censored=include_censored)


def load_frame(store: Store, dataset: str, include_censored: bool = False) -> pd.DataFrame:
    """Benchmark frame of ``dataset`` (runs cut at the token cap scored only with ``include_censored``), read again
    only when the store's content changes (:meth:`Store.signature`: runs, predictors, results)."""
    return _benchmark(store, store.url, dataset, include_censored, store.signature())


def picked_cell(selection, table: pd.DataFrame) -> tuple[str, str] | None:
    """(predictor, scenario) of a selected cell or row of ``table``; None when nothing valid is selected (a
    selection kept from a larger table, e.g. before the step changed, is ignored)."""
    if selection.cells:
        row, column = selection.cells[0]
        if int(row) < len(table.index) and column in table.columns:
            return table.index[int(row)], column
    elif selection.rows and int(selection.rows[0]) < len(table.index):
        return table.index[int(selection.rows[0])], "all"
    return None


def keep_valid(key: str, options: list) -> None:
    """Forget a widget value that is no longer among its options (e.g. after changing the split)."""
    if key in st.session_state and st.session_state[key] not in options:
        del st.session_state[key]


def train_panel(store: Store, dataset: str) -> None:
    """Train chosen baselines on ``dataset`` (PiA asks the home page's model)."""
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


def inspect_cell(store: Store, frame: pd.DataFrame, rows: pd.DataFrame, names: list[str], scenarios: list[str],
                 default_scenario: str) -> None:
    """The predictions behind one (predictor, scenario) cell, their predicted-vs-true heatmap, and one run
    opened with every prediction made for it."""
    keep_valid("inspect_predictor", names)
    keep_valid("inspect_scenario", scenarios)
    st.session_state.setdefault("inspect_scenario", default_scenario)
    c1, c2 = st.columns(2)
    predictor = c1.selectbox("Predictor", names, key="inspect_predictor")
    scenario = c2.selectbox("Scenario", scenarios, key="inspect_scenario")
    cell = cell_rows(rows, predictor, scenario)
    if cell.empty:
        st.info(f"{predictor} has no predictions for scenario {scenario!r} here.")
        return
    st.markdown(f"**{predictor}**, {scenario}: MAE **{cell['abs_error'].mean():.1f}** tokens over {len(cell)} "
                f"predictions (select a row to open its run).")
    shown = cell[["run_id", "prompt_id", "scenario", "split", "step", "predicted", "true", "abs_error"]].round(1)
    pick = show_table(shown, f"predictions-{predictor.replace(':', '-')}-{scenario}", key="cell_table",
                      on_select="rerun", selection_mode="single-row", hide_index=True)
    fig = pred_true_heatmap(*pred_true_histogram(cell["predicted"], cell["true"]), f"{predictor}: predicted vs true")
    show_figure(fig, f"heatmap-{predictor.replace(':', '-')}", key="heatmap")
    run_ids = [int(r) for r in cell["run_id"].unique()]
    if pick.selection.rows:
        st.session_state["inspect_run"] = int(shown["run_id"].iloc[int(pick.selection.rows[0])])
    keep_valid("inspect_run", run_ids)
    run_id = st.selectbox("Open run", run_ids, key="inspect_run")
    with error_boundary():
        run = store.load_run(run_id, layers=[])
    st.markdown(f"Run **{run.id}** (prompt {run.prompt_id}): prompt {run.prompt_len} tokens, true output length "
                f"**{run.output_length}** tokens, {'finished' if run.finished else 'cut at max_new_tokens'}, "
                f"settings {run.settings}.")
    p_col, r_col = st.columns(2)
    p_col.text_area("Prompt", run.prompt, height=220, disabled=True, key=f"prompt_{run.id}")
    r_col.text_area("Response", run.response, height=220, disabled=True, key=f"response_{run.id}")
    st.caption("All predictions for this run (every predictor, every stored step):")
    show_table(run_rows(frame, run_id)[["predictor", "family", "step", "predicted", "true", "split"]].round(1),
               f"run-{run_id}-predictions", hide_index=True)
