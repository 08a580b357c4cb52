"""Scheduler playground: the OUTLETS-preset tab (RR+FCFS vs RR+SJF vs LB+SJF over seeds, with t intervals, beside
the oracle and a constant predictor), and the study's stored preset."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.analysis.papers import OUTLETS_SERVING
from lenscope.app.runner import run_job
from lenscope.app.scheduler import show_results
from lenscope.app.widgets import show_figure, show_table
from lenscope.figures.scheduler import outlets_change_figure
from lenscope.jobs.scheduler.replay import (
    PRESET_SEEDS,
    WORKLOADS,
    PredictorSpec,
    SimConfig,
    format_seed_table,
    outlets_preset,
    preset_seed_table,
    reference_rows,
)
from lenscope.jobs.study.results import stored_preset
from lenscope.jobs.study.shipped import shipped_for
from lenscope.store.store import Store

INTERVALS = ("Means over {n} seeds with 95% Student-t intervals over seeds; the changes vs RR+FCFS and the shares of "
             "the oracle's cut (per seed: the predictor's change over the oracle's) are paired by seed. The "
             "constant predicts one length for all (no information), the oracle the true lengths.")


def show_seed_tables(per_seed: pd.DataFrame, key: str) -> None:
    """The references table (SJF pairs: change vs RR+FCFS and share of the oracle's cut, per predictor), the
    full per-predictor table and how the intervals are made."""
    shown = format_seed_table(preset_seed_table(per_seed))
    st.markdown("**Against the references, on the same requests and arrivals**")
    show_table(reference_rows(shown), "preset-references", key=f"{key}_refs", hide_index=True, width="stretch")
    with st.expander("Latencies per predictor and policy pair"):
        show_table(shown, "preset-latencies", key=f"{key}_all", hide_index=True, width="stretch")
    st.caption(INTERVALS.format(n=per_seed["seed"].nunique()))


def stored_study_preset(store: Store) -> None:
    """The study's preset (shipped while the store holds no study) and the stored one of each dataset that has
    one: per workload its note and tables."""
    shipped = shipped_for(store)
    presets = [] if shipped is None or shipped.preset() is None else [(f"{shipped.dataset}, shipped", shipped.preset())]
    for dataset in store.datasets_frame()["name"]:
        preset = stored_preset(store, dataset)
        if preset is not None:
            presets.append((dataset, preset))
    for index, (dataset, preset) in enumerate(presets):
        with st.expander(f"The study's preset on {dataset} ({preset['predictor']}, {preset['test_runs']} test runs)",
                         expanded=index == 0):
            for workload, result in preset["workloads"].items():
                st.markdown(f"**{workload} workload**: {result['note']}.")
                show_seed_tables(pd.DataFrame(result["per_seed"]), f"study_{dataset}_{workload}")


def outlets_preset_tab(store: Store, trace: pd.DataFrame, spec: PredictorSpec, base: SimConfig,
                       short_q: float) -> None:
    """Workload controls, a run button, the paper's number beside ours, the references and per-seed tables, the first
    seed's views, and the study's stored preset."""
    st.markdown(f"OUTLETS system study: 1 prefill + 3 decode instances, {OUTLETS_SERVING['requests']:,} requests "
                f"with prompts <= {OUTLETS_SERVING['max_prompt_tokens']} tokens (and, decode-bound like the paper's "
                "workload, long outputs) at saturation, RR+FCFS vs RR+SJF vs LB+SJF over several seeds, using the "
                "predictor chosen in the sidebar, the oracle and a constant (the trace's median output length) on "
                "the current trace's lengths.")
    stored_study_preset(store)
    c1, c2, c3 = st.columns(3)
    auto_qps = c1.checkbox("Saturate (4x estimated capacity)", True, key="preset_auto",
                           help="The paper used 100 QPS on its hardware; the estimate adapts to this "
                                "trace's lengths and the cost model.")
    preset_qps = c2.number_input("QPS", 1.0, 10_000.0, OUTLETS_SERVING["qps"], key="preset_qps", disabled=auto_qps)
    preset_n = c3.number_input("Requests", 10, 200_000, OUTLETS_SERVING["requests"], key="preset_n")
    c4, c5, c6 = st.columns(3)
    preset_seeds = c4.number_input("Seeds", 1, 200, PRESET_SEEDS, key="preset_seeds",
                                   help="Each seed re-draws the pool of requests (a bootstrap resample), the requests, "
                                        "the arrivals, the predictor's noise and random dispatch")
    min_output = c5.number_input("Outputs of at least (tokens, 0 = any)", 0, 100_000, 100,
                                 key="preset_min_out", help="The paper's workload has short prompts and long outputs")
    workload = c6.selectbox("Workload", WORKLOADS, key="preset_workload",
                            help="uniform: every request of the pool equally likely; decode-bound: drawn in "
                                 "proportion to its output length")
    if st.button("Run OUTLETS preset", key="preset_run", type="primary"):
        st.session_state["preset"] = run_job(lambda cb: outlets_preset(
            store, trace, spec, base, int(preset_n), None if auto_qps else preset_qps, short_q, cb,
            int(preset_seeds), int(min_output) or None, workload), "preset")
    preset = st.session_state.get("preset")
    if preset is not None:
        st.caption(f"Workload: {preset.note}.")
        means = preset_seed_table(preset.per_seed).set_index(["predictor", "policy"]).loc[spec.label()]
        cols = st.columns(3)
        cols[0].metric("Ours: short P99, RR+FCFS -> LB+SJF", f"{means.loc['LB+SJF', 'short_e2e_p99_s']:.1f} s",
                       f"{100 * preset.changes['LB+SJF']:+.1f}%", delta_color="inverse")
        cols[1].metric("Paper (OUTLETS, reported): short P99", f"{OUTLETS_SERVING['short_p99_after_s']} s",
                       f"{100 * OUTLETS_SERVING['short_p99_change']:+.1f}%", delta_color="inverse")
        cols[2].metric("Ours: RR+SJF change", f"{100 * preset.changes['RR+SJF']:+.1f}%")
        show_seed_tables(preset.per_seed, "preset")
        st.caption("The views below show the first seed of the chosen predictor.")
        show_figure(outlets_change_figure(preset.changes, OUTLETS_SERVING["short_p99_change"]), "preset-change")
        show_results(preset.outcomes, "preset")
    else:
        st.info("Press **Run OUTLETS preset** to simulate the three policy pairs.")
