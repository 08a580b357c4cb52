"""Scheduler playground: the live tab. The embedded model serves held-out study prompts for real under two policies
at a chosen load, and the simulator, calibrated from a profile of the same engine, replays the same requests beside
it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.analysis.core.verdicts import too_few_prompts
from lenscope.analysis.scheduler.metrics import request_latencies
from lenscope.app.runner import run_job
from lenscope.app.widgets import get_target, show_figure, show_table
from lenscope.figures.scheduler import live_cdf_figure
from lenscope.jobs.scheduler.live import (
    DEFAULT_PREDICTOR,
    LOADS,
    ORACLE,
    REPLAYS,
    SIM_READINGS,
    LivePolicy,
    LiveRun,
    LiveSession,
    LiveSetup,
    difference_texts,
    live_session,
    policy_differences,
    predictor_names,
)
from lenscope.jobs.study.shipped import shipped_study

MIN_REQUESTS = 12  # fewer, and a CI over requests is too rough to read a difference from
SESSION = "live_session"
RESULT = "live_runs"


@st.cache_data(show_spinner=False)
def policy_choices() -> dict[str, LivePolicy]:
    """FCFS, then SJF and preemptive SRPT on every shipped predictor's out-of-fold lengths and on the oracle."""
    policies = [LivePolicy("fcfs")] + [LivePolicy(queue, name) for queue in ("sjf", "srpt")
                                       for name in predictor_names()]
    return {p.label: p for p in policies}


def _session(setup: LiveSetup, on_progress) -> LiveSession:
    """The profiled engine of ``setup``, kept in this browser session (profiling takes about half a minute)."""
    held = st.session_state.get(SESSION)
    if held is None or held.setup != setup:
        held = live_session(get_target(""), setup, on_progress)
        st.session_state[SESSION] = held
    return held


ERROR_COLUMNS = ("P99 E2E sim error", "P99 E2E error at the run's speed", "P99 E2E error at the speed over time",
                 "P99 TTFT sim error", "CPU stolen")


def live_table(runs: list[LiveRun]) -> pd.DataFrame:
    """Per policy: real and simulated mean and P99 end-to-end latency and TTFT, with the simulator's P99 errors, and
    how the machine ran: its speed measured before the run against the session's profile, the run's iterations' time
    over the cost model at that speed, the CPU time stolen, and the P99 error once the run's own speed is known, and
    once the machine's speed over time is known."""
    rows = []
    for run in runs:
        s, p99 = run.summary(), run.p99()
        rows.append({"policy": s["policy"], "requests": len(run.real.requests),
                     "mean E2E real (s)": s["real_mean_e2e_s"], "mean E2E sim (s)": s["sim_mean_e2e_s"],
                     "P99 E2E real (s)": p99.loc["e2e", "real_s"], "P99 E2E sim (s)": p99.loc["e2e", "sim_s"],
                     "P99 E2E sim error": p99.loc["e2e", "error"], "P99 TTFT real (s)": p99.loc["ttft", "real_s"],
                     "P99 TTFT sim (s)": p99.loc["ttft", "sim_s"], "P99 TTFT sim error": p99.loc["ttft", "error"],
                     "preemptions": s["preemptions"], "decode speed before": s["speed_decode"],
                     "iterations / that speed": s["iteration_ratio"], "CPU stolen": s["stolen"],
                     "P99 E2E error at the run's speed": run.p99("at_speed").loc["e2e", "error"],
                     "P99 E2E error at the speed over time": run.p99("over_time").loc["e2e", "error"]})
    return pd.DataFrame(rows)


def difference_sentence(runs: list[LiveRun]) -> str:
    """What the real runs and the simulator say of policy A against policy B, with paired 95% CIs."""
    d = policy_differences(runs).iloc[0]
    real, sim, at_speed = difference_texts(d, ("real", "sim", "at_speed"))
    reading = too_few_prompts(int(d["requests"]), MIN_REQUESTS) or SIM_READINGS[d["sim_reading"]]
    return (f"Mean end-to-end latency of {d['A']} minus {d['B']} over the same {d['requests']} requests (paired 95% "
            f"bootstrap CI): real {real} s, simulated {sim} s (both policies on the session's cost model): "
            f"{reading}; simulated at each run's measured speed {at_speed} s. The CI is over requests: it leaves out "
            "how much a whole run varies from one run to the next (the same policy served twice on 2 cores differed "
            "by 6-24% in P99 in the benchmark, which serves each policy twice and reads differences over runs).")


def live_tab() -> None:
    """Pickers (two policies, a load, the number of requests), the serve button and the real-vs-simulated views."""
    st.markdown("The embedded model (SmolLM2-135M-Instruct, the study's target) serves held-out study chat prompts "
                "for real: requests arrive on a Poisson clock, wait in the policy's queue and are batched "
                "continuously (at most 4 rows), with the study's out-of-fold predictions. The engine is profiled at "
                "every batch size on other prompts, and its speed is measured again right before each run; the "
                "simulator, on that profile at that speed, replays the same requests with the same predictions. "
                "`python -m lenscope benchmark live-serving` serves three policies twice each at both loads.")
    if shipped_study() is None:
        st.info("The live tab serves the shipped study's prompts, which this copy lacks: `git checkout data/results`.")
        return
    choices = policy_choices()
    labels = list(choices)
    c1, c2, c3, c4 = st.columns(4)
    first = c1.selectbox("Policy A", labels, index=0, key="live_a")
    preferred = [LivePolicy("sjf", name).label for name in (DEFAULT_PREDICTOR, ORACLE)]
    second = c2.selectbox("Policy B", labels, index=labels.index(next(p for p in preferred if p in labels)),
                          key="live_b")
    load = c3.radio("Load", list(LOADS), index=1, key="live_load", horizontal=True,
                    format_func=lambda name: f"{name} ({LOADS[name]:g} x capacity)")
    requests = c4.number_input("Requests to serve", 4, 24, 12, key="live_requests",
                               help="12 requests take about a minute per policy on 2 CPU cores")
    if st.button("Serve for real", key="live_run", type="primary", disabled=first == second):
        setup = LiveSetup(requests=int(requests))

        def job(on_progress):
            session = _session(setup, on_progress)
            return session, load, session.serve([choices[first], choices[second]], load, on_progress=on_progress)

        st.session_state[RESULT] = run_job(job, "profiling the engine")
    if first == second:
        st.info("Pick two different policies.")
    held = st.session_state.get(RESULT)
    if held is None:
        st.info("Pick two policies and a load and press **Serve for real** (a minute or two on CPU).")
        return
    session, load, runs = held
    st.caption(f"{len(session.evaluation)} requests at {session.qps(load):.2f} requests/s ({load}: {LOADS[load]:g} x "
               f"the estimated capacity of {session.capacity:.2f}); cost model fitted to {len(session.iterations)} "
               f"profiled iterations (prefill MAPE {session.calibration.prefill_mape:.0%}, decode "
               f"{session.calibration.decode_mape:.0%}). Error = (simulated - real) / real. *Decode speed before*: the "
               "machine's speed right before the run against the session's profile (1.1 = 10% slower); *iterations / "
               "that speed* above 1 means it ran slower still during the run (the *CPU stolen* by the hypervisor is "
               "one cause), which the simulator cannot know. The last two columns replay the run at its own average "
               "speed, and at the machine's speed measured over time (2-second windows): what is left of the error "
               "once the machine's drift is known.")
    st.markdown(difference_sentence(runs))
    show_table(live_table(runs).round(3), "live-serving", hide_index=True,
               column_config={c: st.column_config.NumberColumn(format="percent") for c in ERROR_COLUMNS})
    real = {r.policy.label: request_latencies(r.real) for r in runs}
    c1, c2 = st.columns(2)
    metric = c1.radio("Latency", ["e2e_s", "ttft_s", "tpot_s"], key="live_metric", horizontal=True,
                      format_func=lambda m: m.removesuffix("_s").upper())
    replay = c2.radio("Simulated", list(REPLAYS), key="live_replay", format_func=REPLAYS.get,
                      help="the prediction (the speed measured right before the run), or the replay once the "
                           "machine's measured speed is known: on average over the run, or over time")
    sim = {r.policy.label: request_latencies(getattr(r, replay)) for r in runs}
    show_figure(live_cdf_figure(real, sim, metric, f"simulated {REPLAYS[replay]}"), "live-serving-cdf")
