"""Scheduler-playground widgets: trace, predictor and cluster pickers in the sidebar, and result views."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from lenscope.analysis.scheduler.predictors import NUMBER, PREDICTIONS_FILE, TRAINED_PREDICTOR, Option
from lenscope.analysis.scheduler.registry import predictor_kind
from lenscope.app.runner import progress_callback, run_job
from lenscope.app.study import empty_state
from lenscope.app.widgets import download_table, show_figure, show_table
from lenscope.figures.scheduler import gantt_figure, instance_load_figure, latency_cdf_figure, percentile_figure
from lenscope.jobs.runs.datasets import preferred_dataset
from lenscope.jobs.scheduler.parting import parting_load
from lenscope.jobs.scheduler.replay import (
    BATCHING,
    DEFAULT_COST,
    EMPIRICAL_BUCKETS,
    MODES,
    OPENING,
    PREDICTORS,
    PREFILL_QUEUE_POLICIES,
    SPLITWISE_PROFILE,
    TIME_UNITS,
    ImportedPredictions,
    Outcome,
    PredictorSpec,
    SimConfig,
    StageReading,
    TraceFormat,
    UnknownTraceFormat,
    builtin_trace_files,
    compare_sentence,
    compare_table,
    cost_model_options,
    dataset_trace,
    dispatch_choices,
    filter_trace,
    fit_cost_option,
    import_predictions,
    load_trace_file,
    opening_trace,
    poisson_retime,
    predictions_format,
    predictor_choices,
    run_simulation,
)
from lenscope.store.store import Store

NO_COLUMN = "(none)"
PENDING = "sched_pending"  # widget values to set at the start of the next run (the load where policies part)
Mapping = tuple[str, str, str, str, str | None]  # arrival, prompt, output columns, arrival unit, predicted column


@st.cache_data(show_spinner=False, max_entries=8)
def _read_trace(source: str | bytes, mapping: Mapping | None = None,
                name: str | None = None) -> pd.DataFrame | list[str]:
    """The trace (read through ``mapping`` when given), or the file's columns when its format is not recognised;
    ``name`` (an upload's) names the file in messages."""
    try:
        return load_trace_file(Path(source) if isinstance(source, str) else source,
                               TraceFormat(*mapping[:4], predicted=mapping[4]) if mapping else None, name)
    except UnknownTraceFormat as exc:
        return exc.columns


def _column_mapping(columns: list[str]) -> Mapping:
    """Sidebar expander: the columns holding arrival, prompt and output tokens, the arrival unit, and an optional
    column of predicted output lengths."""
    with st.sidebar.expander("Column mapping", expanded=True):
        st.caption("The file's format was not recognised: say which columns to read.")
        picks = [st.selectbox(label, columns, index=min(k, len(columns) - 1), key=f"sched_map_{k}")
                 for k, label in enumerate(["Arrival", "Prompt tokens", "Output tokens"])]
        unit = st.selectbox("Arrival unit", list(TIME_UNITS), key="sched_map_unit")
        predicted = st.selectbox("Predicted tokens (optional)", [NO_COLUMN, *columns], key="sched_map_predicted",
                                 help="An external predictor's output length per request, for the 'trace column' "
                                      "predictor")
    return (*picks, unit, None if predicted == NO_COLUMN else predicted)


@st.cache_data(show_spinner=False, max_entries=1)
def _opening_trace() -> pd.DataFrame:
    return opening_trace()


def _pick_source(store: Store, source: str) -> tuple[pd.DataFrame | None, str]:
    if source == "Built-in trace":
        files = {p.name: p for p in builtin_trace_files()}
        example = OPENING.label() if OPENING.file in files else None
        names = ([example] if example else []) + list(files)
        default = next((k for k, n in enumerate(names) if "conv" in n), 0)
        name = st.sidebar.selectbox("File", names, index=default, key="sched_builtin",
                                    help="The loaded example opens the page: a cluster where the decode stage is the "
                                         "bottleneck, so length-aware scheduling changes who waits")
        return (_opening_trace(), name) if name == example else (_read_trace(str(files[name])), name)
    if source == "Upload file":
        upload = st.sidebar.file_uploader("Trace file: CSV (Azure 2023/2024, BurstGPT, LLMServingSim, Vidur, arrival,"
                                          "prompt_tokens,output_tokens), Mooncake JSON lines, a vLLM / SGLang "
                                          "benchmark result (JSON), or other columns through a mapping; 50 MB / "
                                          "200k rows max", type=["csv", "jsonl", "json"])
        if upload is None:
            st.info("Upload a trace file in the sidebar, or pick a built-in trace / the app's dataset.")
            return None, ""
        trace = _read_trace(upload.getvalue(), name=upload.name)
        if isinstance(trace, list):
            trace = _read_trace(upload.getvalue(), _column_mapping(trace), upload.name)
        return trace, upload.name
    if source == "App dataset":
        datasets = store.datasets_frame()
        if datasets.empty:
            empty_state(store)
            return None, ""
        names = datasets["name"].tolist()
        dataset = st.sidebar.selectbox("Dataset", names, index=names.index(preferred_dataset(names)),
                                       key="sched_dataset")
        qps = st.sidebar.number_input("Poisson QPS", 0.1, 1000.0, 5.0, key="sched_runs_qps")
        runs = st.sidebar.radio("Runs", ["test split", "all splits"], key="sched_runs_split",
                                help="Trained predictors are replayed on test-split runs only (out of sample); "
                                     "all splits suit the oracle and constant predictors. Censored runs (cut at "
                                     "the token cap) are left out.")
        split = "test" if runs == "test split" else None
        return dataset_trace(store, dataset, qps, split=split), f"dataset {dataset} ({runs})"
    traces = store.traces_frame()
    if traces.empty:
        st.info("No stored trace yet: load one and press 'Save trace in the store'.")
        return None, ""
    names = traces.set_index("trace_id")["name"]
    tid = st.sidebar.selectbox("Trace", traces["trace_id"].tolist(), key="sched_stored", format_func=names.get)
    return store.load_trace(tid), f"stored trace {tid}"


def trace_picker(store: Store) -> pd.DataFrame | None:
    """Sidebar: where the trace comes from, filters and re-timing, a save button. None when there is none
    (after saying why)."""
    st.session_state.update(st.session_state.pop(PENDING, None) or {})
    st.sidebar.header("Trace")
    sources = (["Built-in trace"] if builtin_trace_files() else []) + ["Upload file", "App dataset", "Stored trace"]
    source = st.sidebar.radio("Source", sources, key="sched_source")
    with st.sidebar.expander("Filters and re-timing"):
        max_prompt = st.number_input("Max prompt tokens (0 = no limit)", 0, 1_000_000, 0, key="sched_max_prompt")
        first_n = st.number_input("First N requests (0 = all)", 0, 1_000_000, 0, key="sched_first_n")
        retime = st.number_input("Poisson re-timing QPS (0 = keep arrivals)", 0.0, 10_000.0, key="sched_qps")
    try:
        trace, name = _pick_source(store, source)
        if trace is None:
            return None
        for note in trace.attrs.get("notes", []):
            st.sidebar.caption(note)
        trace = filter_trace(trace, max_prompt or None, first_n or None)
        if retime > 0 and source != "App dataset":
            trace = poisson_retime(trace, retime)
    except ValueError as exc:
        st.error(str(exc))
        return None
    st.sidebar.caption(f"{len(trace):,} requests over {trace['arrival_s'].max():.0f} s · mean prompt "
                       f"{trace['prompt_tokens'].mean():.0f} · mean output {trace['output_tokens'].mean():.0f} "
                       "tokens" + (" · carries predicted lengths" if "predicted_tokens" in trace else ""))
    if st.sidebar.button("Save trace in the store", key="sched_save_trace"):
        st.sidebar.success(f"saved as trace {store.save_trace(name, source, trace)}")
    return trace


def _imported_predictions(store: Store) -> tuple[ImportedPredictions, str] | None:
    """Sidebar: an uploaded predictions file and how to read it, imported (evaluated once, kept in the store);
    None after saying why there is none."""
    upload = st.sidebar.file_uploader("Predictions file: true length and prediction per row (CSV or JSON lines, "
                                      "columns such as true_tokens, predicted_tokens or predicted_class; 50 MB / "
                                      "200k rows max here, larger files with `python -m lenscope evaluate-predictions "
                                      "PATH`)", type=["csv", "jsonl"], key="sched_pred_file")
    classes = st.sidebar.checkbox("Predictions are class indices (ranks)", key="sched_pred_classes",
                                  help="SJF needs only their order; a column named predicted_class or bucket is "
                                       "read as classes anyway")
    edges = st.sidebar.text_input("Bucket edges of the classes (optional, for MAE)", key="sched_pred_edges",
                                  placeholder="0,64,128,256,512,1024",
                                  help="K + 1 token edges for classes 0..K-1: class k stands for its bucket's midpoint")
    if upload is None:
        st.info("Upload an external predictor's (true length, prediction) file in the sidebar: the simulator then "
                "draws predictions with its real errors.")
        return None
    try:
        imported = import_predictions(store, upload.getvalue(), predictions_format("", classes, edges), upload.name)
    except ValueError as exc:
        st.error(str(exc))
        return None
    return imported, upload.name


def show_prediction_evaluation(imported: ImportedPredictions, name: str) -> None:
    """The predictions file's sample size, MAE and Kendall tau with their CIs, and its per-bucket confusion table."""
    ev, warning = imported.evaluation, imported.pairs.class_index_warning()
    with st.expander(f"Predictions file {name}: how accurate it is", expanded=True):
        if warning:
            st.warning(f"{warning}, so the MAE is meaningless if they are. Tick *Predictions are class indices* in "
                       "the sidebar (and give bucket edges for an MAE).")
        cols = st.columns(3)
        cols[0].metric("Pairs (n)", f"{ev.n:,}")
        cols[1].metric("MAE (tokens), 95% CI", "ranks only" if ev.mae is None else ev.mae_text())
        cols[2].metric("Kendall tau, 95% CI", ev.tau_text())
        st.caption(f"{ev.lines()[-1]}. Rows: true-length buckets; columns: predicted buckets or classes. The "
                   f"simulator draws each request's prediction from the pairs in its true length's bucket "
                   f"({EMPIRICAL_BUCKETS} quantile buckets of the file's true lengths), so policies see this "
                   "predictor's real errors.")
        show_table(ev.confusion, "predictions-confusion", width="stretch")


def predictor_picker(store: Store, trace: pd.DataFrame) -> PredictorSpec | None:
    """Sidebar: the predictor the policies see (trained ones only for traces of the app's runs, the trace column only
    for traces that carry predictions)."""
    st.sidebar.header("Predictor")
    kinds = predictor_choices(trace.columns)
    kind = st.sidebar.selectbox("Predictor", kinds, index=1, key="sched_predictor", format_func=PREDICTORS.label,
                                help="\n".join(f"- **{PREDICTORS.label(k)}**: {PREDICTORS.description(k)}"
                                               for k in kinds))
    values = {}
    for name, option in predictor_kind(kind).options.asked():  # the kind's own options, each by its source's field
        value = FORM_FIELDS[option.source](store, option)
        if value is None:
            return None
        values[name] = value
    return PredictorSpec(kind, **values)


def _number_field(store: Store, option: Option) -> float:
    """A number input over the option's range (up to its form bound), from the value it starts from."""
    return st.sidebar.number_input(option.label, float(option.valid.low), option.high, option.ask, key=option.key)


def _trained_predictor_field(store: Store, option: Option) -> int | None:
    """A select of the store's trained predictors (None, after saying so, when there is none)."""
    predictors = store.predictors_frame()
    if predictors.empty:
        st.warning("No trained predictor yet: train one on the Remaining length or Drafter pages.")
        return None
    names = predictors.set_index("predictor_id")["name"]
    return int(st.sidebar.selectbox(option.label, predictors["predictor_id"].tolist(), format_func=names.get))


def _predictions_file_field(store: Store, option: Option) -> str | None:
    """An uploaded predictions file, imported and evaluated (its evaluation shown): its digest (None: no file)."""
    imported = _imported_predictions(store)
    if imported is None:
        return None
    show_prediction_evaluation(*imported)
    return imported[0].key


# The form field of each source of predictor options (the registry says which options a kind has).
FORM_FIELDS = {NUMBER: _number_field, TRAINED_PREDICTOR: _trained_predictor_field,
               PREDICTIONS_FILE: _predictions_file_field}


def cluster_picker(trace: pd.DataFrame) -> tuple[SimConfig, float]:
    """Sidebar: instances, batching, KV capacity, chunked prefill, prefix caching (traces with block hashes), cost
    model; returns the base config and the short/long split quantile."""
    st.sidebar.header("Cluster")
    mode = st.sidebar.selectbox("Mode", MODES, key="sched_mode")
    c1, c2 = st.sidebar.columns(2)
    n_prefill = c1.number_input("Prefill instances", 1, 16, OPENING.n_prefill, disabled=mode == "colocated",
                                key="sched_np")
    n_decode = c2.number_input("Decode instances" if mode == "disaggregated" else "Instances", 1, 32,
                               OPENING.n_decode, key="sched_nd")
    batching = st.sidebar.selectbox("Batching", BATCHING, key="sched_batching")
    max_batch = st.sidebar.number_input("Batch-size cap", 1, 4096, 256, key="sched_batch")
    kv_cap = st.sidebar.number_input("KV capacity per instance (tokens)", 1024, 10_000_000, 262_144, step=16_384,
                                     key="sched_kv")
    chunkable = mode == "colocated" and batching == "continuous"
    chunk = st.sidebar.number_input("Chunked prefill: tokens per iteration (0 = off)", 0, 1_000_000, 0, step=256,
                                    key="sched_chunk", disabled=not chunkable,
                                    help="Each iteration mixes decodes (one token each) and prefill chunks up to this "
                                         "budget (colocated, continuous batching)")
    chunk_tokens = max(int(chunk), int(max_batch)) if chunk and chunkable else None
    if chunk_tokens and chunk_tokens != chunk:
        st.sidebar.caption(f"Budget raised to the batch-size cap ({chunk_tokens}).")
    hashed = "hash_ids" in trace and batching == "continuous"
    cache = st.sidebar.number_input("Prefix cache per instance (tokens, 0 = off)", 0, 100_000_000, 0, step=16_384,
                                    key="sched_prefix", disabled=not hashed,
                                    help="LRU cache of prompt KV blocks from the trace's hash_ids (Mooncake traces); "
                                         "hits skip the prefill of the cached blocks")
    block = st.sidebar.number_input("Tokens per block hash", 1, 65_536, 512, key="sched_hash_block",
                                    disabled=not hashed)
    prefix_cache = max(int(cache), int(block)) if cache and hashed else None
    short_q = st.sidebar.slider("Short/long split (quantile of output length)", 0.1, 0.9, 0.5, key="sched_q")
    cost, options = DEFAULT_COST, cost_model_options(SPLITWISE_PROFILE)
    if options:
        choice = st.sidebar.selectbox("Cost model", ["default (8B on H100-class)", *options], key="sched_cost")
        if choice in options:
            fit = fit_cost_option(SPLITWISE_PROFILE, options[choice])
            cost = fit.cost
            st.sidebar.caption(f"fitted on Splitwise profile: prefill MAPE {fit.prefill_mape:.0%}, "
                               f"decode MAPE {fit.decode_mape:.0%}")
    base = SimConfig(mode=mode, n_prefill=int(n_prefill), n_decode=int(n_decode), batching=batching,
                     max_batch_size=int(max_batch), kv_capacity_tokens=int(kv_cap), cost=cost,
                     chunk_tokens=chunk_tokens, prefix_cache_tokens=prefix_cache,
                     hash_block_tokens=int(block))
    return base, short_q


def dispatch_options(base: SimConfig) -> list[str]:
    """The dispatch policies ``base`` can use (cache-aware dispatch needs prefix caching)."""
    return list(dispatch_choices(bool(base.prefix_cache_tokens)))


def policy_options(col, k: int, base: SimConfig) -> dict:
    """One comparison column's prefill-queue and preemption controls, as ``SimConfig`` fields (the defaults where the
    cluster cannot use them: prefill queues need prefill instances, preemption continuous batching)."""
    disaggregated, continuous = base.mode == "disaggregated", base.batching == "continuous"
    prefill = col.selectbox("Prefill queue", PREFILL_QUEUE_POLICIES.names(), key=f"cmp_pq{k}",
                            disabled=not disaggregated, help=PREFILL_QUEUE_POLICIES.describe())
    preemptive = col.checkbox("Preemptive", key=f"cmp_pre{k}", disabled=not continuous,
                              help="The queue policy preempts running requests for waiting ones with a smaller key "
                                   "(preemptive SRPT with the srpt queue); KV is recomputed on resumption") \
        and continuous
    limit = col.number_input("Preempt only under c x predicted length (0 = always)", 0.0, 100.0, 0.0,
                             key=f"cmp_c{k}", disabled=not preemptive, help="TRAIL's limited preemption")
    most = col.number_input("Max preemptions per request (0 = no limit)", 0, 1000, 0, key=f"cmp_mp{k}",
                            disabled=not preemptive)
    return {"prefill_queue": prefill if disaggregated else "fcfs", "preemptive": preemptive,
            "preempt_limit": (limit or None) if preemptive else None,
            "max_preemptions": (int(most) or None) if preemptive else None}


def run_configs(store: Store, configs: list[SimConfig], trace: pd.DataFrame, spec: PredictorSpec,
                short_q: float, label: str) -> list[Outcome]:
    """Simulate each configuration under one progress bar per run (cached results come back at once; one stored
    before stage readings were kept is simulated again)."""
    bar = st.progress(0.0, text=label)
    outcomes = []
    for k, config in enumerate(configs):
        progress = progress_callback(bar, f"{label} {k + 1}/{len(configs)}")
        outcome = run_simulation(store, trace, spec, config, short_q, on_progress=progress)
        if StageReading.from_summary(outcome.summary) is None:
            outcome = run_simulation(store, trace, spec, config, short_q, on_progress=progress, use_cache=False)
        outcomes.append(outcome)
    bar.empty()
    return outcomes


def _rerun_where_they_part(store: Store, configs: list[SimConfig], trace: pd.DataFrame, spec: PredictorSpec,
                           short_q: float) -> None:
    """Measure the load where the configurations part; found, set the sidebar's re-timing (and prefill instances)
    there and rerun the page, which then simulates it (already stored)."""
    parting = run_job(lambda cb: parting_load(store, trace, spec, configs, short_q, on_progress=cb),
                      "searching the load where they part")
    if parting is None:
        return
    if parting.qps is None:
        st.warning(parting.note)
        return
    dataset = st.session_state.get("sched_source") == "App dataset"  # (its Poisson QPS field, up to 1,000)
    qps = {"sched_runs_qps": min(parting.qps, 1000.0)} if dataset else {"sched_qps": min(parting.qps, 10_000.0)}
    st.session_state[PENDING] = {**qps, "sched_np": parting.n_prefill}
    st.session_state["cmp_note"] = parting.note
    for key in ("cmp_outcomes", "cmp_opened"):
        st.session_state.pop(key, None)
    st.rerun()


def compare_section(store: Store, configs: list[SimConfig], trace: pd.DataFrame, spec: PredictorSpec,
                    short_q: float) -> None:
    """The comparison: simulated on the page's first open (the loaded example) and on **Run simulation**, then one
    sentence on what to look at, or why the configurations tie with a button that reruns where they part, and the
    results."""
    pressed = st.button("Run simulation", key="cmp_run", type="primary")
    if pressed or not st.session_state.get("cmp_opened"):
        st.session_state["cmp_opened"] = True
        if pressed:
            st.session_state.pop("cmp_note", None)
        try:
            st.session_state["cmp_outcomes"] = run_configs(store, configs, trace, spec, short_q, "simulating")
        except ValueError as exc:
            st.error(str(exc))
    outcomes = st.session_state.get("cmp_outcomes")
    if outcomes is None:
        st.info("Choose up to 4 configurations and press **Run simulation**.")
        return
    if st.session_state.get("cmp_note"):
        st.caption(st.session_state["cmp_note"])
    tie, sentence = compare_sentence([o.summary for o in outcomes])
    if tie:
        st.warning(sentence)
        if st.button("Rerun at the load where they part", key="cmp_part",
                     help="Simulates these configurations at rising loads (Poisson re-timing of this trace, from the "
                          "decode stage's estimated capacity) and stops at the first where they no longer tie"):
            _rerun_where_they_part(store, configs, trace, spec, short_q)
    elif sentence:
        st.info(sentence)
    show_results(outcomes, "cmp")


def show_results(outcomes: list[Outcome], key: str) -> None:
    """Table, percentile bars, latency CDFs, per-instance load, a timeline and CSV downloads."""
    table = compare_table(outcomes)
    first = outcomes[0].summary
    for col, outcome in zip(st.columns(len(outcomes)), outcomes):
        p99 = outcome.summary["short_e2e_p99_s"]
        change = None if outcome is outcomes[0] else f"{p99 / first['short_e2e_p99_s'] - 1:+.0%} vs {first['label']}"
        col.metric(f"Short-request P99: {outcome.summary['label']}", f"{p99:.1f} s", change, delta_color="inverse")
    st.markdown(f"**{len(outcomes)} configuration(s)** ({sum(o.cached for o in outcomes)} read from the store)")
    show_table(table.round(3), "scheduler-summary", key=f"{key}_summary", hide_index=True, width="stretch")
    by_label = {o.summary["label"]: o.requests for o in outcomes}
    show_figure(percentile_figure(table), f"{key}-pct")
    metric = st.selectbox("CDF metric", ["e2e_s", "ttft_s", "tpot_s"], key=f"{key}_metric")
    cls = st.selectbox("Requests", ["all", "short", "long"], key=f"{key}_cls")
    show_figure(latency_cdf_figure(by_label, metric, None if cls == "all" else cls), f"{key}-cdf")
    pick = st.selectbox("Configuration for the load and timeline views", list(by_label), key=f"{key}_pick")
    chosen = outcomes[list(by_label).index(pick)]
    show_figure(instance_load_figure(chosen.load), f"{key}-load")
    show_figure(gantt_figure(chosen.requests), f"{key}-gantt")
    download_table(pd.concat([o.requests.assign(config=o.summary["label"]) for o in outcomes]),
                   "scheduler-requests", key=f"{key}_requests", what="every request")
