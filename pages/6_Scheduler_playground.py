"""Scheduler playground: replay a request trace through a simulated serving cluster with a predictor."""

from __future__ import annotations

import streamlit as st

from lenscope.app.runner import run_job
from lenscope.app.serving import cluster_picker, predictor_picker, run_configs, show_results, trace_picker
from lenscope.app.widgets import get_store, show_figure
from lenscope.figures.serving import noise_sweep_figure, outlets_change_figure
from lenscope.jobs.serving import (
    DISPATCH_POLICIES,
    OUTLETS_PAPER,
    QUEUE_POLICY_NAMES,
    noise_sweep,
    outlets_preset,
    parse_maes,
    run_simulation,
)

st.set_page_config(page_title="Scheduler playground · lenscope", layout="wide")
st.title("Scheduler playground")
st.caption("A discrete-event simulation of P prefill + D decode instances (or colocated instances) with "
           "continuous or static batching. Policies only see the predictor's lengths, never the truth. "
           "CLI: `python -m lenscope simulate --trace PATH --dispatch lb --queue sjf` (a file in another layout: "
           "`--columns arrival=COL,prompt=COL,output=COL --time-unit ms`); an external predictor's file: "
           "`python -m lenscope evaluate-predictions PATH`, then `simulate --predictor empirical --predictions PATH`.")
store = get_store()
trace = trace_picker(store)
spec = predictor_picker(store, trace) if trace is not None else None
if trace is None or spec is None:
    st.stop()
base, short_q = cluster_picker()
compare_tab, preset_tab, sweep_tab = st.tabs(["Compare configurations", "OUTLETS preset", "Noise sweep"])

with compare_tab:
    n_configs = st.number_input("Configurations", 1, 4, 2, key="cmp_n")
    configs = []
    for col, k in zip(st.columns(int(n_configs)), range(int(n_configs))):
        dispatch = col.selectbox("Dispatch", DISPATCH_POLICIES, index=0 if k == 0 else 2, key=f"cmp_d{k}")
        queue = col.selectbox("Queue", QUEUE_POLICY_NAMES, index=0 if k == 0 else 1, key=f"cmp_q{k}")
        aging = col.number_input("Aging guard (s, 0 = off)", 0.0, 10_000.0, 0.0, key=f"cmp_a{k}")
        configs.append(base.with_(dispatch=dispatch, queue=queue, aging_s=aging or None))
    if st.button("Run simulation", key="cmp_run", type="primary"):
        try:
            st.session_state["cmp_outcomes"] = run_configs(store, configs, trace, spec, short_q, "simulating")
        except ValueError as exc:
            st.error(str(exc))
    if "cmp_outcomes" in st.session_state:
        show_results(st.session_state["cmp_outcomes"], "cmp")
    else:
        st.info("Choose up to 4 configurations and press **Run simulation**.")

with preset_tab:
    st.markdown(f"OUTLETS system study: 1 prefill + 3 decode instances, {OUTLETS_PAPER['requests']:,} requests "
                f"with prompts <= {OUTLETS_PAPER['max_prompt_tokens']} tokens at saturation, RR+FCFS vs RR+SJF "
                "vs LB+SJF, using the predictor chosen in the sidebar and the current trace's lengths.")
    c1, c2, c3 = st.columns(3)
    auto_qps = c1.checkbox("Saturate (4x estimated capacity)", True, key="preset_auto",
                           help="The paper used 100 QPS on its hardware; the estimate adapts to this "
                                "trace's lengths and the cost model.")
    preset_qps = c2.number_input("QPS", 1.0, 10_000.0, OUTLETS_PAPER["qps"], key="preset_qps", disabled=auto_qps)
    preset_n = c3.number_input("Requests", 10, 200_000, OUTLETS_PAPER["requests"], key="preset_n")
    if st.button("Run OUTLETS preset", key="preset_run", type="primary"):
        st.session_state["preset"] = run_job(lambda cb: outlets_preset(
            store, trace, spec, base, int(preset_n), None if auto_qps else preset_qps, short_q, cb), "preset")
    preset = st.session_state.get("preset")
    if preset is not None:
        st.caption(f"Workload: {preset.note}.")
        cols = st.columns(3)
        cols[0].metric("Ours: short P99, RR+FCFS -> LB+SJF",
                       f"{preset.outcomes[-1].summary['short_e2e_p99_s']:.1f} s",
                       f"{100 * preset.changes['LB+SJF']:+.1f}%", delta_color="inverse")
        cols[1].metric("Paper (OUTLETS, reported): short P99", f"{OUTLETS_PAPER['short_p99_after_s']} s",
                       f"{100 * OUTLETS_PAPER['short_p99_change']:+.1f}%", delta_color="inverse")
        cols[2].metric("Ours: RR+SJF change", f"{100 * preset.changes['RR+SJF']:+.1f}%")
        show_figure(outlets_change_figure(preset.changes, OUTLETS_PAPER["short_p99_change"]),
                    "preset-change")
        show_results(preset.outcomes, "preset")
    else:
        st.info("Press **Run OUTLETS preset** to simulate the three policy pairs.")

with sweep_tab:
    st.markdown("Oracle lengths plus Laplace noise of growing MAE feed one configuration; the dotted line "
                "is RR+FCFS (no prediction used).")
    c1, c2, c3 = st.columns(3)
    sweep_dispatch = c1.selectbox("Dispatch", DISPATCH_POLICIES, index=DISPATCH_POLICIES.index("lb"), key="sweep_d")
    sweep_queue = c2.selectbox("Queue", QUEUE_POLICY_NAMES, index=QUEUE_POLICY_NAMES.index("sjf"), key="sweep_q")
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
        st.dataframe(sweep.round(3), hide_index=True)
    else:
        st.info("Press **Run sweep** to see how prediction noise changes the scheduling outcome.")
