"""Scheduler playground: replay a request trace through a simulated serving cluster with a predictor."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from analysis.scheduler.cost_model import DEFAULT_COST, fit_cost_model, profile_configs
from analysis.scheduler.engine import SimConfig
from analysis.traces import filter_trace, from_runs, load_trace_file, poisson_retime, shared_trace_files
from lenscope import ui
from lenscope.ui import progress_callback
from lenscope.figures.scheduler import (
    gantt_figure, instance_load_figure, latency_cdf_figure, noise_sweep_figure, outlets_change_figure,
    percentile_figure,
)
from lenscope.scheduler_jobs import (
    OUTLETS_PAPER, PredictorSpec, compare_table, noise_sweep, outlets_configs, outlets_trace, run_simulation,
    saturating_qps, short_p99_change,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PROFILE = SHARED / "splitwise_perf_model.csv"

st.set_page_config(page_title="Scheduler playground · lenscope", layout="wide")
st.title("Scheduler playground")
st.caption("A discrete-event simulation of P prefill + D decode instances (or colocated instances) with "
           "continuous or static batching. Policies only see the predictor's lengths, never the truth. "
           "CLI: `python -m lenscope simulate --trace PATH --dispatch lb --queue sjf`.")
store = ui.get_store()


@st.cache_data(show_spinner=False, max_entries=8)
def read_trace(source: str | bytes) -> pd.DataFrame:
    return load_trace_file(Path(source) if isinstance(source, str) else source)


# trace --------------------------------------------------------------------------------------------
st.sidebar.header("Trace")
shared = shared_trace_files(SHARED)
sources = (["Shared trace file"] if shared else []) + ["Upload CSV", "App dataset", "Stored trace"]
source = st.sidebar.radio("Source", sources, key="sched_source")
trace, trace_name = None, ""
try:
    if source == "Shared trace file":
        names = [p.name for p in shared]
        default = next((k for k, n in enumerate(names) if "conv" in n), 0)
        name = st.sidebar.selectbox("File", names, index=default, key="sched_shared")
        trace, trace_name = read_trace(str(SHARED / name)), name
    elif source == "Upload CSV":
        upload = st.sidebar.file_uploader("Trace CSV (Azure 2023, LLMServingSim or arrival,prompt_tokens,"
                                          "output_tokens; 50 MB / 200k rows max)", type="csv")
        if upload is not None:
            trace, trace_name = read_trace(upload.getvalue()), upload.name
    elif source == "App dataset":
        datasets = store.datasets_frame()
        if datasets.empty:
            st.info("No dataset yet: collect one with `python -m lenscope collect --dataset dev`.")
        else:
            dataset = st.sidebar.selectbox("Dataset", datasets["name"].tolist(), key="sched_dataset")
            qps = st.sidebar.number_input("Poisson QPS", 0.1, 1000.0, 5.0, key="sched_runs_qps")
            trace, trace_name = from_runs(store.runs_frame(dataset), qps), f"dataset {dataset}"
    else:
        traces = store.traces_frame()
        if traces.empty:
            st.info("No stored trace yet: load one and press 'Save trace in the store'.")
        else:
            tid = st.sidebar.selectbox("Trace", traces["trace_id"].tolist(), key="sched_stored",
                                       format_func=lambda t: traces.set_index("trace_id").loc[t, "name"])
            trace, trace_name = store.load_trace(tid), f"stored trace {tid}"
except ValueError as exc:
    st.error(str(exc))

if trace is None:
    if source == "Upload CSV":
        st.info("Upload a trace CSV in the sidebar, or pick a shared trace file / the app's dataset.")
    st.stop()

with st.sidebar.expander("Filters and re-timing"):
    max_prompt = st.number_input("Max prompt tokens (0 = no limit)", 0, 1_000_000, 0, key="sched_max_prompt")
    first_n = st.number_input("First N requests (0 = all)", 0, 1_000_000, 0, key="sched_first_n")
    retime = st.number_input("Poisson re-timing QPS (0 = keep arrivals)", 0.0, 10_000.0, 0.0, key="sched_qps")
try:
    trace = filter_trace(trace, max_prompt or None, first_n or None)
    if retime > 0 and source != "App dataset":
        trace = poisson_retime(trace, retime)
except ValueError as exc:
    st.error(str(exc))
    st.stop()
st.sidebar.caption(f"{len(trace):,} requests over {trace['arrival_s'].max():.0f} s · mean prompt "
                   f"{trace['prompt_tokens'].mean():.0f} · mean output {trace['output_tokens'].mean():.0f} tokens")
if st.sidebar.button("Save trace in the store", key="sched_save_trace"):
    tid = store.save_trace(trace_name, source, trace)
    st.sidebar.success(f"saved as trace {tid}")

# predictor ----------------------------------------------------------------------------------------
st.sidebar.header("Predictor")
kinds = ["oracle", "oracle-noise", "constant"] + (["stored"] if "run_id" in trace else [])
kind = st.sidebar.selectbox("Predictor", kinds, index=1, key="sched_predictor")
spec = PredictorSpec(kind=kind)
if kind == "oracle-noise":
    spec = PredictorSpec(kind=kind, mae=st.sidebar.number_input("Noise MAE (tokens)", 0.0, 10_000.0, 50.0,
                                                                 key="sched_mae"))
elif kind == "constant":
    spec = PredictorSpec(kind=kind, constant=st.sidebar.number_input("Constant length", 1.0, 100_000.0, 256.0))
elif kind == "stored":
    predictors = store.predictors_frame()
    if predictors.empty:
        st.warning("No trained predictor yet: train one on the Remaining length or Drafter pages.")
        st.stop()
    pid = st.sidebar.selectbox("Trained predictor", predictors["predictor_id"].tolist(),
                               format_func=lambda p: predictors.set_index("predictor_id").loc[p, "name"])
    spec = PredictorSpec(kind=kind, predictor_id=int(pid))

# cluster ------------------------------------------------------------------------------------------
st.sidebar.header("Cluster")
mode = st.sidebar.selectbox("Mode", ["disaggregated", "colocated"], key="sched_mode")
c1, c2 = st.sidebar.columns(2)
n_prefill = c1.number_input("Prefill instances", 1, 16, 1, disabled=mode == "colocated", key="sched_np")
n_decode = c2.number_input("Decode instances" if mode == "disaggregated" else "Instances", 1, 32, 3, key="sched_nd")
batching = st.sidebar.selectbox("Batching", ["continuous", "static"], key="sched_batching")
max_batch = st.sidebar.number_input("Batch-size cap", 1, 4096, 256, key="sched_batch")
kv_cap = st.sidebar.number_input("KV capacity per instance (tokens)", 1024, 10_000_000, 262_144, step=16_384,
                                 key="sched_kv")
short_q = st.sidebar.slider("Short/long split (quantile of output length)", 0.1, 0.9, 0.5, key="sched_q")
cost = DEFAULT_COST
if PROFILE.exists():
    profile = pd.read_csv(PROFILE)
    options = ["default (8B on H100-class)"] + [f"{r.model} / {r.hardware} / TP{r.tensor_parallel}"
                                               for r in profile_configs(profile).itertuples()]
    choice = st.sidebar.selectbox("Cost model", options, key="sched_cost")
    if choice != options[0]:
        model_name, hardware, tp = [part.strip() for part in choice.split("/")]
        fit = fit_cost_model(profile, model_name, hardware, int(tp.removeprefix("TP")))
        cost = fit.cost
        st.sidebar.caption(f"fitted on Splitwise profile: prefill MAPE {fit.prefill_mape:.0%}, "
                           f"decode MAPE {fit.decode_mape:.0%}")
base = SimConfig(mode=mode, n_prefill=int(n_prefill), n_decode=int(n_decode), batching=batching,
                 max_batch_size=int(max_batch), kv_capacity_tokens=int(kv_cap), cost=cost)


def run_all(configs: list[SimConfig], run_trace: pd.DataFrame, label: str) -> list:
    bar = st.progress(0.0, text=label)
    outcomes = []
    for k, config in enumerate(configs):
        outcomes.append(run_simulation(store, run_trace, spec, config, short_q,
                                       on_progress=progress_callback(bar, f"{label} {k + 1}/{len(configs)}")))
    bar.empty()
    return outcomes


def show_results(outcomes: list, key: str) -> None:
    table = compare_table(outcomes)
    cached = sum(o.cached for o in outcomes)
    st.markdown(f"**{len(outcomes)} configuration(s)** ({cached} from the store cache)")
    st.dataframe(table.round(3), hide_index=True, width="stretch")
    by_label = {f"{o.summary['label']}": o.requests for o in outcomes}
    st.plotly_chart(percentile_figure(table), key=f"{key}_pct")
    metric = st.selectbox("CDF metric", ["e2e_s", "ttft_s", "tpot_s"], key=f"{key}_metric")
    cls = st.selectbox("Requests", ["all", "short", "long"], key=f"{key}_cls")
    st.plotly_chart(latency_cdf_figure(by_label, metric, None if cls == "all" else cls), key=f"{key}_cdf")
    pick = st.selectbox("Configuration for the load and timeline views", list(by_label), key=f"{key}_pick")
    chosen = outcomes[list(by_label).index(pick)]
    st.plotly_chart(instance_load_figure(chosen.load), key=f"{key}_load")
    st.plotly_chart(gantt_figure(chosen.requests), key=f"{key}_gantt")
    c1, c2 = st.columns(2)
    c1.download_button("Summary CSV", table.to_csv(index=False), "scheduler_summary.csv", key=f"{key}_dl1")
    c2.download_button("Per-request CSV", pd.concat([o.requests.assign(config=o.summary["label"])
                                                     for o in outcomes]).to_csv(index=False),
                       "scheduler_requests.csv", key=f"{key}_dl2")


compare_tab, preset_tab, sweep_tab = st.tabs(["Compare configurations", "OUTLETS preset", "Noise sweep"])

with compare_tab:
    n_configs = st.number_input("Configurations", 1, 4, 2, key="cmp_n")
    configs = []
    for col, k in zip(st.columns(int(n_configs)), range(int(n_configs))):
        dispatch = col.selectbox("Dispatch", ["rr", "random", "lb"], index=0 if k == 0 else 2, key=f"cmp_d{k}")
        queue = col.selectbox("Queue", ["fcfs", "sjf", "srpt"], index=0 if k == 0 else 1, key=f"cmp_q{k}")
        aging = col.number_input("Aging guard (s, 0 = off)", 0.0, 10_000.0, 0.0, key=f"cmp_a{k}")
        configs.append(base.with_(dispatch=dispatch, queue=queue, aging_s=aging or None))
    if st.button("Run simulation", key="cmp_run", type="primary"):
        try:
            st.session_state["cmp_outcomes"] = run_all(configs, trace, "simulating")
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
        try:
            shaped, _ = outlets_trace(trace, 1.0, n_requests=int(preset_n))
            qps = saturating_qps(shaped, outlets_configs(base)[0]) if auto_qps else preset_qps
            preset_trace, note = outlets_trace(trace, qps, n_requests=int(preset_n))
            st.session_state["preset"] = (run_all(outlets_configs(base), preset_trace, "preset"), note)
        except ValueError as exc:
            st.error(str(exc))
    if "preset" in st.session_state:
        outcomes, note = st.session_state["preset"]
        st.caption(f"Workload: {note}.")
        changes = {o.summary["label"].split(" ")[0]: short_p99_change(outcomes[0], o) for o in outcomes[1:]}
        cols = st.columns(3)
        cols[0].metric("Ours: short P99, RR+FCFS -> LB+SJF",
                       f"{outcomes[-1].summary['short_e2e_p99_s']:.1f} s", f"{100 * changes['LB+SJF']:+.1f}%",
                       delta_color="inverse")
        cols[1].metric("Paper (OUTLETS, reported): short P99", f"{OUTLETS_PAPER['short_p99_after_s']} s",
                       f"{100 * OUTLETS_PAPER['short_p99_change']:+.1f}%", delta_color="inverse")
        cols[2].metric("Ours: RR+SJF change", f"{100 * changes['RR+SJF']:+.1f}%")
        st.plotly_chart(outlets_change_figure(changes, OUTLETS_PAPER["short_p99_change"]), key="preset_change")
        show_results(outcomes, "preset")
    else:
        st.info("Press **Run OUTLETS preset** to simulate the three policy pairs.")

with sweep_tab:
    st.markdown("Oracle lengths plus Laplace noise of growing MAE feed one configuration; the dotted line "
                "is RR+FCFS (no prediction used).")
    c1, c2, c3 = st.columns(3)
    sweep_dispatch = c1.selectbox("Dispatch", ["lb", "rr", "random"], key="sweep_d")
    sweep_queue = c2.selectbox("Queue", ["sjf", "srpt", "fcfs"], key="sweep_q")
    maes_text = c3.text_input("MAE values", "0, 25, 50, 100, 200, 400", key="sweep_maes")
    if st.button("Run sweep", key="sweep_run", type="primary"):
        try:
            maes = [float(x) for x in maes_text.split(",") if x.strip()]
            bar = st.progress(0.0, text="sweep")
            sweep = noise_sweep(store, trace, base.with_(dispatch=sweep_dispatch, queue=sweep_queue), maes,
                                short_quantile=short_q, on_progress=progress_callback(bar, "sweep"))
            baseline = run_simulation(store, trace, spec, base.with_(dispatch="rr", queue="fcfs"), short_q)
            bar.empty()
            st.session_state["sweep"] = (sweep, baseline.summary["short_e2e_p99_s"])
        except ValueError as exc:
            st.error(f"{exc} (MAE values must be comma-separated numbers)")
    if "sweep" in st.session_state:
        sweep, baseline = st.session_state["sweep"]
        st.plotly_chart(noise_sweep_figure(sweep, baseline), key="sweep_fig")
        st.dataframe(sweep.round(3), hide_index=True)
    else:
        st.info("Press **Run sweep** to see how prediction noise changes the scheduling outcome.")
