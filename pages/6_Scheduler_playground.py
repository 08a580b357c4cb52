"""Scheduler playground: replay a request trace through a simulated serving cluster with a predictor."""

from __future__ import annotations

import streamlit as st

from lenscope.app.docs import docs_link
from lenscope.app.live_serving import live_tab
from lenscope.app.qps_sweep import qps_sweep_tab
from lenscope.app.runner import run_job
from lenscope.app.scheduler import (
    cluster_picker,
    compare_section,
    dispatch_options,
    policy_options,
    predictor_picker,
    trace_picker,
)
from lenscope.app.scheduler_preset import outlets_preset_tab
from lenscope.app.widgets import get_store, show_figure, show_table
from lenscope.figures.scheduler import noise_sweep_figure
from lenscope.jobs.scheduler.replay import (
    QUEUE_POLICIES,
    noise_sweep,
    parse_maes,
    run_simulation,
)
from lenscope.jobs.study.shipped import shipped_for
from lenscope.jobs.study.tour import drafter_epochs, scheduling_stop

st.set_page_config(page_title="Scheduler playground · lenscope", layout="wide")
st.title("Scheduler playground")
st.caption("A simulated serving cluster whose policies see only the predicted lengths, never the truth; the last "
           "tab serves prompts on the embedded model for real beside it.")
docs_link("guide/scheduler-playground")
store = get_store()
shipped = shipped_for(store)
trace = trace_picker(store)
spec = predictor_picker(store, trace) if trace is not None else None
if trace is None or spec is None:
    st.stop()
base, short_q = cluster_picker(trace)
dispatches = dispatch_options(base)
compare_tab, preset_tab, sweep_tab, qps_tab, live = st.tabs(["Compare configurations", "OUTLETS preset", "Noise sweep",
                                                             "QPS sweep", "Live serving"])

with compare_tab:
    configs = []
    with st.expander("Configurations: dispatch, queue and options of each (RR+FCFS beside LB+SJF to start)"):
        n_configs = st.number_input("Configurations", 1, 4, 2, key="cmp_n")
        for col, k in zip(st.columns(int(n_configs)), range(int(n_configs))):
            dispatch = col.selectbox("Dispatch", dispatches, index=0 if k == 0 else 2, key=f"cmp_d{k}")
            queue = col.selectbox("Queue", QUEUE_POLICIES.names(), index=0 if k == 0 else 1, key=f"cmp_q{k}")
            aging = col.number_input("Aging guard (s, 0 = off)", 0.0, 10_000.0, 0.0, key=f"cmp_a{k}")
            configs.append(base.with_(dispatch=dispatch, queue=queue, aging_s=aging or None,
                                      **policy_options(col, k, base)))
    compare_section(store, configs, trace, spec, short_q)

with preset_tab:
    if shipped is not None and shipped.preset() is not None:
        stop = scheduling_stop(shipped.preset(), drafter_epochs(shipped))
        st.info(f"**The study (shipped results): the drafter's short-request P99 change {stop.number} "
                f"({stop.interval})**: {stop.detail}. It rests on {stop.rests_on}. {stop.paper}. {shipped.label}")
    outlets_preset_tab(store, trace, spec, base, short_q)

with sweep_tab:
    st.markdown("Oracle lengths plus Laplace noise of growing MAE feed one configuration; the dotted line "
                "is RR+FCFS (no prediction used).")
    c1, c2, c3 = st.columns(3)
    sweep_dispatch = c1.selectbox("Dispatch", dispatches, index=dispatches.index("lb"), key="sweep_d")
    queues = QUEUE_POLICIES.names()
    sweep_queue = c2.selectbox("Queue", queues, index=queues.index("sjf"), key="sweep_q")
    maes_text = c3.text_input("MAE values", "0, 25, 50, 100, 200, 400", key="sweep_maes")
    if st.button("Run sweep", key="sweep_run", type="primary"):
        def sweep_job(cb):
            sweep = noise_sweep(store, trace, base.with_(dispatch=sweep_dispatch, queue=sweep_queue),
                                parse_maes(maes_text), short_quantile=short_q, on_progress=cb)
            baseline = run_simulation(store, trace, spec, base.with_(dispatch="rr", queue="fcfs"), short_q)
            return sweep, baseline.summary["short_e2e_p99_s"]
        st.session_state["sweep"] = run_job(sweep_job, "sweep")
    if st.session_state.get("sweep") is not None:
        sweep, baseline = st.session_state["sweep"]
        show_figure(noise_sweep_figure(sweep, baseline), "sweep-fig")
        show_table(sweep.round(3), "noise-sweep", hide_index=True)
    else:
        st.info("Press **Run sweep** to see how prediction noise changes the scheduling outcome.")

with qps_tab:
    qps_sweep_tab(store, trace, spec, base, short_q, dispatches)

with live:
    live_tab()
