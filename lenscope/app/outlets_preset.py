"""Scheduler playground: the OUTLETS-preset tab (RR+FCFS vs RR+SJF vs LB+SJF over seeds, with CIs)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from cache.store import Store
from lenscope.app.runner import run_job
from lenscope.app.serving import show_results
from lenscope.app.widgets import show_figure
from lenscope.figures.serving import outlets_change_figure
from lenscope.jobs.serving import (
    OUTLETS_PAPER,
    PredictorSpec,
    SimConfig,
    format_seed_table,
    outlets_preset,
    preset_seed_table,
)


def outlets_preset_tab(store: Store, trace: pd.DataFrame, spec: PredictorSpec, base: SimConfig,
                       short_q: float) -> None:
    """Workload controls, a run button, the paper's number beside ours, the per-seed CI table and the first seed's
    views."""
    st.markdown(f"OUTLETS system study: 1 prefill + 3 decode instances, {OUTLETS_PAPER['requests']:,} requests "
                f"with prompts <= {OUTLETS_PAPER['max_prompt_tokens']} tokens (and, decode-bound like the paper's "
                "workload, long outputs) at saturation, RR+FCFS vs RR+SJF vs LB+SJF over several seeds, using the "
                "predictor chosen in the sidebar and the current trace's lengths.")
    c1, c2, c3 = st.columns(3)
    auto_qps = c1.checkbox("Saturate (4x estimated capacity)", True, key="preset_auto",
                           help="The paper used 100 QPS on its hardware; the estimate adapts to this "
                                "trace's lengths and the cost model.")
    preset_qps = c2.number_input("QPS", 1.0, 10_000.0, OUTLETS_PAPER["qps"], key="preset_qps", disabled=auto_qps)
    preset_n = c3.number_input("Requests", 10, 200_000, OUTLETS_PAPER["requests"], key="preset_n")
    c4, c5 = st.columns(2)
    preset_seeds = c4.number_input("Seeds", 1, 20, 5, key="preset_seeds",
                                   help="Each seed re-draws the arrivals, the predictor's noise and random dispatch")
    min_output = c5.number_input("Decode-bound: outputs of at least (tokens, 0 = any)", 0, 100_000, 100,
                                 key="preset_min_out", help="The paper's workload has short prompts and long outputs")
    if st.button("Run OUTLETS preset", key="preset_run", type="primary"):
        st.session_state["preset"] = run_job(lambda cb: outlets_preset(
            store, trace, spec, base, int(preset_n), None if auto_qps else preset_qps, short_q, cb,
            int(preset_seeds), int(min_output) or None), "preset")
    preset = st.session_state.get("preset")
    if preset is not None:
        st.caption(f"Workload: {preset.note}.")
        seed_table = preset_seed_table(preset.per_seed)
        means = seed_table.set_index("policy")
        cols = st.columns(3)
        cols[0].metric("Ours: short P99, RR+FCFS -> LB+SJF", f"{means.loc['LB+SJF', 'short_e2e_p99_s']:.1f} s",
                       f"{100 * means.loc['LB+SJF', 'short_p99_change']:+.1f}%", delta_color="inverse")
        cols[1].metric("Paper (OUTLETS, reported): short P99", f"{OUTLETS_PAPER['short_p99_after_s']} s",
                       f"{100 * OUTLETS_PAPER['short_p99_change']:+.1f}%", delta_color="inverse")
        cols[2].metric("Ours: RR+SJF change", f"{100 * means.loc['RR+SJF', 'short_p99_change']:+.1f}%")
        st.dataframe(format_seed_table(seed_table), hide_index=True, width="stretch")
        st.caption("Means over seeds [95% bootstrap CI over seeds]; the changes are paired by seed. The views below "
                   "show the first seed.")
        show_figure(outlets_change_figure({p: means.loc[p, "short_p99_change"] for p in ("RR+SJF", "LB+SJF")},
                                          OUTLETS_PAPER["short_p99_change"]), "preset-change")
        show_results(preset.outcomes, "preset")
    else:
        st.info("Press **Run OUTLETS preset** to simulate the three policy pairs.")
