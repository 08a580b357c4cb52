"""Scheduler-playground jobs: build predictors, run cached simulations, the OUTLETS preset, sweeps.

Results are cached in the store (``put_result("scheduler_sim", ...)``) under the full simulation
config, the predictor spec and the trace's content hash, so reruns never recompute.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.core.metrics import bootstrap_mean, ci_text
from analysis.core.progress import Progress, no_progress
from analysis.serving.cost_model import DEFAULT_COST, Calibration, fit_cost_model, profile_configs
from analysis.serving.engine import BATCHING, MODES, SimConfig, simulate
from analysis.serving.external_predictions import predictions_format
from analysis.serving.metrics import instance_load, relative_change, request_latencies, summarize
from analysis.serving.predictors import EMPIRICAL_BUCKETS
from analysis.serving.registry import (
    DISPATCH_POLICIES,
    PREDICTORS,
    PREFILL_QUEUE_POLICIES,
    QUEUE_POLICIES,
    dispatch_choices,
    make_predictor,
    predictor_choices,
)
from analysis.serving.traces import (
    TIME_UNITS,
    TraceFormat,
    UnknownTraceFormat,
    filter_trace,
    from_runs,
    load_trace_file,
    poisson_retime,
    trace_files,
    trace_hash,
)
from cache.settings import REPO_ROOT
from cache.store import Store
from lenscope.jobs.datasets import dataset_runs
from lenscope.jobs.external_predictions import ImportedPredictions, import_predictions, stored_pairs

__all__ = [  # the registries and trace helpers the app and CLI read from here, and this module's own API
    "BATCHING", "DEFAULT_COST", "DISPATCH_POLICIES", "EMPIRICAL_BUCKETS", "ImportedPredictions", "MODES",
    "OUTLETS_PAPER", "Outcome", "PREDICTORS", "PREFILL_QUEUE_POLICIES", "PredictorSpec", "PresetOutcome",
    "QUEUE_POLICIES", "SHIPPED_TRACES", "SPLITWISE_PROFILE", "SimConfig", "TIME_UNITS",
    "TraceFormat", "UnknownTraceFormat", "builtin_trace_files", "check_out_of_sample", "compare_table",
    "cost_model_options", "dataset_trace", "dispatch_choices", "filter_trace", "fit_cost_option",
    "format_seed_table", "from_runs", "import_predictions", "load_trace_file", "noise_sweep", "outlets_configs",
    "outlets_preset", "outlets_trace", "parse_maes", "poisson_retime", "predictions_format", "predictor_choices",
    "preset_seed_table", "run_simulation", "saturating_qps", "short_p99_change"]

SHIPPED_TRACES = REPO_ROOT / "data" / "traces"  # public traces and the Splitwise profile, sources in its README
SPLITWISE_PROFILE = SHIPPED_TRACES / "splitwise_perf_model.csv"

RESULT_KIND = "scheduler_sim"
MAX_STORED_REQUESTS = 20_000  # per-request rows kept in a cached result (a seeded sample beyond)
REQUEST_COLUMNS = ["rid", "arrival_s", "prompt_tokens", "output_tokens", "predicted_tokens", "decode_instance",
                   "preemptions", "cached_tokens", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
                   "length_class"]

# OUTLETS system study (paper, Sec. system-level evaluation): 1P+3D, 1,914 ShareGPT requests with
# prompts <= 50 tokens, 100 QPS; short-request P99 latency 59.8 s (RR+FCFS) -> 39.0 s (LB+SJF).
OUTLETS_PAPER = {"requests": 1914, "max_prompt_tokens": 50, "qps": 100.0,
                 "short_p99_before_s": 59.8, "short_p99_after_s": 39.0, "short_p99_change": -0.348}
OUTLETS_POLICIES = [("rr", "fcfs"), ("rr", "sjf"), ("lb", "sjf")]


@dataclass(frozen=True)
class PredictorSpec:
    """Which predictor feeds the policies (``predictions``: the digest of an imported predictions file, for the
    empirical predictor)."""

    kind: str = "oracle"
    mae: float = 0.0
    constant: float = 256.0
    predictor_id: int | None = None
    seed: int = 0
    update_every: int = 32
    predictions: str | None = None

    def label(self) -> str:
        return {"oracle": "oracle", "oracle-noise": f"oracle+noise (MAE {self.mae:g})",
                "constant": f"constant {self.constant:g}", "stored": f"stored predictor #{self.predictor_id}",
                "trace-column": "trace column predicted_tokens",
                "empirical": f"empirical (file {(self.predictions or '')[:8]})"}.get(self.kind, self.kind)


@dataclass
class Outcome:
    """A (possibly cached) simulation outcome: headline numbers and per-request/-instance frames."""

    summary: dict
    requests: pd.DataFrame
    load: pd.DataFrame
    cached: bool

    @classmethod
    def from_payload(cls, payload: dict, cached: bool) -> Outcome:
        """The outcome of a stored (or just simulated) payload."""
        return cls(summary=payload["summary"], requests=pd.DataFrame(payload["requests"]),
                   load=pd.DataFrame(payload["load"]), cached=cached)


def build_predictor(store: Store, spec: PredictorSpec, trace: pd.DataFrame):
    """The predictor of ``spec`` for ``trace`` (stored predictors need the trace's run ids, the trace-column one
    its predicted_tokens column, the empirical one an imported predictions file)."""
    predictions = run_ids = pairs = None
    if spec.kind == "stored":
        if spec.predictor_id is None:
            raise ValueError("choose a trained predictor (predictor_id)")
        if "run_id" not in trace or trace["run_id"].isna().any():
            raise ValueError("a trained predictor needs a trace built from the app's runs (with run ids)")
        if spec.predictor_id not in set(store.predictors_frame()["predictor_id"].astype(int)):
            raise ValueError(f"no trained predictor with id {spec.predictor_id}; the Results page and "
                             "`python -m lenscope claims` list the stored ones")
        predictions, run_ids = store.predictions_frame(spec.predictor_id), trace["run_id"].to_numpy(np.int64)
        check_out_of_sample(predictions, run_ids)
    if spec.kind == "empirical":
        pairs = stored_pairs(store, spec.predictions)
    predicted = trace["predicted_tokens"].to_numpy(float) if "predicted_tokens" in trace else None
    return make_predictor(spec.kind, trace["output_tokens"].to_numpy(), mae=spec.mae, constant=spec.constant,
                          seed=spec.seed, update_every=spec.update_every, run_ids=run_ids, predictions=predictions,
                          predicted=predicted, pairs=pairs)


def check_out_of_sample(predictions: pd.DataFrame, run_ids: np.ndarray) -> None:
    """Refuse a replay that would feed a trained predictor's in-sample predictions: every run of the trace
    must be a test-split run of that predictor."""
    splits = predictions.drop_duplicates("run_id").set_index("run_id")["split"]
    seen = splits.reindex(run_ids)
    in_sample = int((seen != "test").sum())
    if in_sample:
        raise ValueError(f"{in_sample} of {len(run_ids)} runs of this trace are not in the predictor's test split "
                         "(in-sample or unseen); replay its test runs only (`--split test`, the page's default)")


def dataset_trace(store: Store, dataset: str, qps: float, seed: int = 0, split: str | None = "test",
                  include_censored: bool = False) -> pd.DataFrame:
    """Trace of a dataset's uncensored runs (true lengths), Poisson arrivals at ``qps``; ``split`` "test"
    keeps the runs every trained predictor saw out of sample, None keeps all (for oracle or constant)."""
    runs = dataset_runs(store, dataset, include_censored)
    if split is not None:
        runs = runs[runs["split"] == split]
        if runs.empty:
            raise ValueError(f"dataset {dataset!r} has no {'' if include_censored else 'uncensored '}{split} runs "
                             "to replay")
    return from_runs(runs, qps, seed)


def builtin_trace_files() -> list[Path]:
    """The traces shipped in ``data/traces`` (profiles such as Splitwise's are not traces)."""
    return trace_files(SHIPPED_TRACES)


def result_key(trace: pd.DataFrame, spec: PredictorSpec, config: SimConfig, short_quantile: float) -> dict:
    return {"trace": trace_hash(trace), "predictor": asdict(spec), "config": config.to_dict(),
            "short_quantile": short_quantile}


def simulation_payload(trace: pd.DataFrame, predictor, config: SimConfig, short_quantile: float, label: str,
                       on_progress: Progress = no_progress) -> dict:
    """Simulate one configuration and return what the store keeps of it (no store needed: Ray tasks run this)."""
    result = simulate(trace, predictor, config, on_progress=on_progress)
    lat = request_latencies(result, short_quantile)
    if len(lat) > MAX_STORED_REQUESTS:
        lat = lat.sample(n=MAX_STORED_REQUESTS, random_state=0).sort_values("rid")
    return {"summary": {**summarize(result, short_quantile), "predictor": label},
            "requests": lat[REQUEST_COLUMNS].to_dict(orient="list"),
            "load": instance_load(result).to_dict(orient="list")}


def run_simulation(store: Store, trace: pd.DataFrame, spec: PredictorSpec, config: SimConfig,
                   short_quantile: float = 0.5, on_progress: Progress = no_progress,
                   use_cache: bool = True) -> Outcome:
    """Simulate (or fetch from the store) one configuration on one trace."""
    key = result_key(trace, spec, config, short_quantile)
    payload = store.get_result(RESULT_KIND, key) if use_cache else None
    cached = payload is not None
    if payload is None:
        payload = simulation_payload(trace, build_predictor(store, spec, trace), config, short_quantile,
                                     spec.label(), on_progress)
        store.put_result(RESULT_KIND, f"{config.label()} | {spec.label()}", key, payload)
    return Outcome.from_payload(payload, cached)


def outlets_trace(trace: pd.DataFrame, qps: float = OUTLETS_PAPER["qps"], seed: int = 0,
                  n_requests: int = OUTLETS_PAPER["requests"],
                  min_output_tokens: int | None = None) -> tuple[pd.DataFrame, str]:
    """The OUTLETS workload shape from any trace: prompts <= 50 tokens (and, decode-bound like the paper's
    workload, outputs >= ``min_output_tokens``), ``n_requests`` of them (the first ones; drawn with replacement,
    seeded, when fewer qualify), Poisson at ``qps``. Returns the trace and a note saying how it was built."""
    short = filter_trace(trace, max_prompt_tokens=OUTLETS_PAPER["max_prompt_tokens"])
    if min_output_tokens:
        short = short[short["output_tokens"] >= min_output_tokens]
        if short.empty:
            raise ValueError(f"no request has a prompt <= {OUTLETS_PAPER['max_prompt_tokens']} tokens and an output "
                             f">= {min_output_tokens} tokens; lower the minimum output or pick another trace")
    if len(short) >= n_requests:
        picked, how = short.head(n_requests), f"first {n_requests}"
    else:
        rows = np.random.default_rng(seed).integers(0, len(short), size=n_requests)
        picked, how = short.iloc[rows], f"{n_requests} drawn with replacement from {len(short)}"
    outputs = f" and outputs >= {min_output_tokens} tokens" if min_output_tokens else ""
    note = (f"{how} requests with prompts <= {OUTLETS_PAPER['max_prompt_tokens']} tokens{outputs}, "
            f"Poisson arrivals at {qps:g} QPS")
    if min_output_tokens:
        note += (f" (mean prompt {picked['prompt_tokens'].mean():.0f}, mean output "
                 f"{picked['output_tokens'].mean():.0f} tokens)")
    return poisson_retime(picked.reset_index(drop=True), qps, seed), note


def saturating_qps(trace: pd.DataFrame, config: SimConfig, factor: float = 4.0) -> float:
    """``factor`` times the cluster's estimated request capacity for this trace's mean lengths.

    Decode capacity: every decode instance running full batches of the mean request (context = mean
    prompt + half the mean output); prefill capacity: full prefill batches (token budget) of mean
    prompts (colocated instances share both, so the two times add up)."""
    prompt, output = float(trace["prompt_tokens"].mean()), float(trace["output_tokens"].mean())
    size = config.max_batch_size
    step = config.cost.decode.step_s(size, size, size * (prompt + output / 2))
    decode_s = step * output / size  # instance-seconds of decoding per request
    per_batch = max(1.0, min(size, config.max_prefill_tokens / prompt))
    prefill_s = config.cost.prefill.step_s(per_batch * prompt, per_batch, 0) / per_batch
    if config.mode == "colocated":
        return factor * config.n_decode / (decode_s + prefill_s)
    return factor * min(config.n_decode / decode_s, config.n_prefill / prefill_s)


def outlets_configs(base: SimConfig = SimConfig()) -> list[SimConfig]:
    """RR+FCFS, RR+SJF and LB+SJF on 1 prefill + 3 decode instances."""
    return [base.with_(mode="disaggregated", n_prefill=1, n_decode=3, batching="continuous", chunk_tokens=None,
                       dispatch=d, queue=q) for d, q in OUTLETS_POLICIES]


@dataclass
class PresetOutcome:
    """The OUTLETS preset: one outcome per policy pair (RR+FCFS first) of the first seed, how the workload was built,
    the short-request P99 change of each other pair against RR+FCFS, and per seed and pair the headline metrics
    (:data:`PRESET_METRICS`, and ``short_p99_change``)."""

    outcomes: list[Outcome]
    note: str
    changes: dict[str, float]
    per_seed: pd.DataFrame = field(default_factory=pd.DataFrame)


PRESET_METRICS = ("short_e2e_p99_s", "all_e2e_p99_s", "mean_jct_s")


def policy_label(dispatch: str, queue: str) -> str:
    return f"{dispatch.upper()}+{queue.upper()}"


def outlets_preset(store: Store, trace: pd.DataFrame, spec: PredictorSpec, base: SimConfig = SimConfig(),
                   n_requests: int = OUTLETS_PAPER["requests"], qps: float | None = None,
                   short_quantile: float = 0.5, on_progress: Progress = no_progress, seeds: int = 1,
                   min_output_tokens: int | None = None) -> PresetOutcome:
    """Run RR+FCFS, RR+SJF and LB+SJF on the OUTLETS workload shape built from ``trace`` (decode-bound with
    ``min_output_tokens``); ``qps`` None saturates the cluster (4x its estimated capacity for this trace's lengths).
    Seeds 0 .. ``seeds`` - 1 re-draw the arrivals (and the requests, when drawn), and offset the predictor's and the
    config's seeds (noise, random dispatch); the first seed is the single-seed preset. Every run is memoised."""
    configs = outlets_configs(base)
    if qps is None:
        qps = saturating_qps(outlets_trace(trace, 1.0, n_requests=n_requests, min_output_tokens=min_output_tokens)[0],
                             configs[0])
    rows, first = [], None
    for seed in range(seeds):
        shaped, note = outlets_trace(trace, qps, seed, n_requests, min_output_tokens)
        outcomes = [run_simulation(store, shaped, replace(spec, seed=spec.seed + seed),
                                   config.with_(seed=config.seed + seed), short_quantile) for config in configs]
        rows += [{"seed": seed, "policy": policy_label(d, q), **{m: o.summary[m] for m in PRESET_METRICS},
                  "short_p99_change": short_p99_change(outcomes[0], o)}
                 for (d, q), o in zip(OUTLETS_POLICIES, outcomes)]
        first = first or (outcomes, note)
        on_progress(seed + 1, seeds, "seeds")
    outcomes, note = first
    changes = {policy_label(d, q): short_p99_change(outcomes[0], o)
               for (d, q), o in zip(OUTLETS_POLICIES[1:], outcomes[1:])}
    return PresetOutcome(outcomes, note if seeds == 1 else f"{note}; seeds 0-{seeds - 1}", changes, pd.DataFrame(rows))


def preset_seed_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per policy pair: the mean over seeds of each metric of :data:`PRESET_METRICS` and of the short-request P99
    change vs RR+FCFS (paired by seed), with 95% bootstrap CIs over seeds."""
    rows = []
    for policy, group in per_seed.groupby("policy", sort=False):
        row: dict = {"policy": policy, "seeds": len(group)}
        for metric in (*PRESET_METRICS, "short_p99_change"):
            est = bootstrap_mean(group[metric].to_numpy(float))
            row.update({metric: est.value, f"{metric}_lo": est.lo, f"{metric}_hi": est.hi})
        rows.append(row)
    return pd.DataFrame(rows)


def format_seed_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`preset_seed_table` as text: ``mean [lo, hi]`` per metric (latencies in s, the change in %)."""
    shown = table[["policy", "seeds"]].copy()
    for metric, label, scale, signed in (("short_e2e_p99_s", "short P99 (s)", 1, False),
                                         ("all_e2e_p99_s", "all P99 (s)", 1, False),
                                         ("mean_jct_s", "mean JCT (s)", 1, False),
                                         ("short_p99_change", "short P99 vs RR+FCFS (%)", 100, True)):
        shown[label] = [ci_text(scale * v, scale * lo, scale * hi, signed=signed, digits=2 if scale == 1 else 1)
                        for v, lo, hi in table[[metric, f"{metric}_lo", f"{metric}_hi"]].to_numpy()]
    return shown


def cost_model_options(profile_path) -> dict[str, tuple[str, str, int]]:
    """Label -> (model, hardware, tensor parallel) of each configuration in a Splitwise profile CSV
    (empty when the file is absent)."""
    if not profile_path.exists():
        return {}
    rows = profile_configs(pd.read_csv(profile_path)).itertuples()
    return {f"{r.model} / {r.hardware} / TP{r.tensor_parallel}": (r.model, r.hardware, int(r.tensor_parallel))
            for r in rows}


def fit_cost_option(profile_path, option: tuple[str, str, int]) -> Calibration:
    """The cost model fitted to one configuration of a Splitwise profile CSV."""
    return fit_cost_model(pd.read_csv(profile_path), *option)


def compare_table(outcomes: list[Outcome]) -> pd.DataFrame:
    """Headline metrics side by side (one row per configuration)."""
    cols = ["label", "predictor", "all_e2e_p50_s", "all_e2e_p99_s", "short_e2e_p99_s", "long_e2e_p99_s",
            "all_ttft_p99_s", "all_tpot_p50_s", "throughput_tok_s", "mean_jct_s", "padding_ratio", "preemptions",
            "prefix_hit_rate"]
    return pd.DataFrame([{c: o.summary.get(c) for c in cols} for o in outcomes])


def short_p99_change(baseline: Outcome, other: Outcome) -> float:
    """Relative change of the short-request P99 end-to-end latency (negative = better)."""
    return relative_change(baseline.summary["short_e2e_p99_s"], other.summary["short_e2e_p99_s"])


def parse_maes(text: str) -> list[float]:
    """Noise levels from comma-separated numbers (a clear error otherwise)."""
    try:
        maes = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ValueError(f"MAE values must be comma-separated numbers, not {text!r}") from exc
    if not maes or min(maes) < 0:
        raise ValueError("give at least one MAE value, none negative")
    return maes


def noise_sweep(store: Store, trace: pd.DataFrame, config: SimConfig, maes: list[float], seed: int = 0,
                short_quantile: float = 0.5,
                on_progress: Progress = no_progress) -> pd.DataFrame:
    """Scheduling outcome vs oracle+noise MAE for one configuration (each point cached)."""
    rows = []
    for k, mae in enumerate(maes):
        spec = PredictorSpec(kind="oracle-noise", mae=float(mae), seed=seed)
        out = run_simulation(store, trace, spec, config, short_quantile)
        rows.append({"mae": float(mae), **{m: out.summary[m] for m in
                                           ("short_e2e_p99_s", "all_e2e_p99_s", "long_e2e_p99_s",
                                            "mean_jct_s", "throughput_tok_s")}})
        on_progress(k + 1, len(maes), "noise levels")
    return pd.DataFrame(rows)
