"""Scheduler playground: the QPS-sweep tab (latency vs load of chosen policies, and where each saturates)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.app.runner import run_job
from lenscope.app.widgets import show_figure, show_table
from lenscope.figures.scheduler import qps_sweep_figure
from lenscope.jobs.scheduler.grid_sweep import GRID_METRICS
from lenscope.jobs.scheduler.qps_sweep import (
    SATURATION_GROWTH,
    SATURATION_SERVED,
    default_qps,
    parse_policies,
    parse_qps,
    qps_sweep,
    saturation_points,
    saturation_text,
)
from lenscope.jobs.scheduler.replay import QUEUE_POLICIES, PredictorSpec, SimConfig, saturating_qps
from lenscope.store.store import Store

DEFAULT_POLICIES = ["rr+fcfs", "rr+sjf", "lb+sjf"]


def qps_sweep_tab(store: Store, trace: pd.DataFrame, spec: PredictorSpec, base: SimConfig, short_q: float,
                  dispatches: list[str]) -> None:
    """Policy and QPS pickers, a run button, the latency-vs-load figure, the table and the saturation points."""
    st.markdown("Each point replays this trace's requests with Poisson arrivals at that QPS through the sidebar's "
                "cluster. A point is *saturated* (a cross) when the backlog keeps growing (the last quarter of "
                f"arrivals finds over {SATURATION_GROWTH:g}x as many requests in the system as the second quarter) "
                f"and the cluster serves less than {SATURATION_SERVED:.0%} of the offered rate.")
    choices = [f"{d}+{q}" for d in dispatches for q in QUEUE_POLICIES.names()]
    c1, c2 = st.columns(2)
    picked = c1.multiselect("Policies", choices, [p for p in DEFAULT_POLICIES if p in choices], key="qps_policies",
                            format_func=str.upper)
    capacity = saturating_qps(trace, base, factor=1.0)
    qps_text = c2.text_input("QPS values", ", ".join(f"{q:g}" for q in default_qps(trace, base)), key="qps_values",
                             help=f"Default: 0.25 to 1.5 times the estimated capacity ({capacity:.3g} QPS)")
    metric = st.selectbox("Latency shown", GRID_METRICS[:5], index=2, key="qps_metric")
    if st.button("Run QPS sweep", key="qps_run", type="primary"):
        def job(cb):
            values = parse_qps(qps_text)
            return qps_sweep(store, trace, spec, base, parse_policies(",".join(picked)), values,
                             short_quantile=short_q, on_progress=cb), values
        st.session_state["qps_sweep"] = run_job(job, "QPS sweep")
    if st.session_state.get("qps_sweep") is None:
        st.info("Choose policies and loads and press **Run QPS sweep**.")
        return
    sweep, values = st.session_state["qps_sweep"]
    show_figure(qps_sweep_figure(sweep, metric, capacity), "qps-sweep-fig")
    for line in saturation_text(saturation_points(sweep), values):
        st.markdown(f"- {line}")
    show_table(sweep.round(3), "qps-sweep", hide_index=True)
