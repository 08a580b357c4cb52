"""Scheduler-playground jobs: build predictors, run cached simulations, the OUTLETS preset, sweeps.

Results are memoised in the store (``store.memo("scheduler_sim", ...)``) under the full simulation
config, the predictor spec and the trace's content hash, so reruns never recompute.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.papers import OUTLETS_SERVING
from lenscope.analysis.results.leaderboard import constant_predictions
from lenscope.analysis.scheduler.bottleneck import StageReading, compare_sentence, read_stages
from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, Calibration, fit_cost_model, profile_configs
from lenscope.analysis.scheduler.engine import BATCHING, MODES, QPS, SimConfig, simulate
from lenscope.analysis.scheduler.external_predictions import predictions_format
from lenscope.analysis.scheduler.metrics import instance_load, relative_change, request_latencies, summarize, t_interval
from lenscope.analysis.scheduler.predictors import EMPIRICAL_BUCKETS, NOISE_MAE
from lenscope.analysis.scheduler.registry import (
    DISPATCH_POLICIES,
    PREDICTORS,
    PREFILL_QUEUE_POLICIES,
    QUEUE_POLICIES,
    dispatch_choices,
    predictor_choices,
)
from lenscope.analysis.scheduler.traces import (
    TIME_UNITS,
    WORKLOADS,
    TraceFormat,
    UnknownTraceFormat,
    draw_requests,
    filter_trace,
    from_runs,
    load_trace_file,
    poisson_retime,
    trace_files,
    trace_hash,
)
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.jobs.scheduler.external_predictions import ImportedPredictions, import_predictions
from lenscope.jobs.scheduler.predictor_spec import PredictorSpec, build_predictor, check_out_of_sample
from lenscope.store.settings import SHIPPED_DATA
from lenscope.store.store import Store

__all__ = [  # the registries and trace helpers the app and CLI read from here, and this module's own API
    "BATCHING", "DEFAULT_COST", "DISPATCH_POLICIES", "EMPIRICAL_BUCKETS", "ImportedPredictions", "MODES", "OPENING",
    "Opening", "Outcome", "PREDICTORS", "PREFILL_QUEUE_POLICIES", "PRESET_SEEDS", "PredictorSpec", "PresetOutcome",
    "QUEUE_POLICIES", "SHIPPED_TRACES", "SPLITWISE_PROFILE", "SimConfig", "StageReading", "TIME_UNITS",
    "TraceFormat", "UnknownTraceFormat", "WORKLOADS", "builtin_trace_files", "check_out_of_sample",
    "compare_sentence", "compare_table", "cost_model_options", "dataset_trace", "dispatch_choices", "filter_trace",
    "fit_cost_option", "format_seed_table", "from_runs", "import_predictions", "load_trace_file", "noise_sweep",
    "opening_trace", "outlets_configs", "outlets_preset", "outlets_trace", "parse_maes", "poisson_retime",
    "predictions_format", "predictor_choices", "preset_predictors", "preset_seed_table", "reference_rows",
    "run_simulation", "saturating_qps", "short_p99_change", "stage_capacity", "training_median"]

SHIPPED_TRACES = SHIPPED_DATA / "traces"  # public traces and the Splitwise profile, sources in its README
SPLITWISE_PROFILE = SHIPPED_TRACES / "splitwise_perf_model.csv"

RESULT_KIND = "scheduler_sim"
MAX_STORED_REQUESTS = 20_000  # per-request rows kept in a cached result (a seeded sample beyond)
REQUEST_COLUMNS = ["rid", "arrival_s", "prompt_tokens", "output_tokens", "predicted_tokens", "decode_instance",
                   "preemptions", "cached_tokens", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
                   "length_class"]

OUTLETS_POLICIES = [("rr", "fcfs"), ("rr", "sjf"), ("lb", "sjf")]
PRESET_SEEDS = 20  # the preset's seeds by default: each a new request pool, draw and arrivals


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


def dataset_trace(store: Store, dataset: str, qps: float, seed: int = 0, split: str | None = "test",
                  include_censored: bool = False) -> pd.DataFrame:
    """Trace of a dataset's uncensored runs (true lengths), Poisson arrivals at ``qps``; ``split`` "test"
    keeps the runs every trained predictor saw out of sample, None keeps all (for oracle or constant)."""
    QPS.check("qps", qps)
    runs = dataset_runs(store, dataset, include_censored)
    if runs.empty:  # the dataset has runs (dataset_runs refuses an empty one), every one cut at the cap
        raise ValueError(f"dataset {dataset!r} has {len(store.runs_frame(dataset)):,} runs, all censored at the token "
                         "cap (their true lengths are unknown); collect it again with a larger --max-new-tokens")
    if split is not None:
        runs = runs[runs["split"] == split]
        if runs.empty:
            raise ValueError(f"dataset {dataset!r} has no {'' if include_censored else 'uncensored '}{split} runs "
                             "to replay")
    return from_runs(runs, qps, seed)


def training_median(store: Store, dataset: str, include_censored: bool = False) -> float:
    """The constant reference's prediction for a dataset: the median output length of its training runs (the
    leaderboard's constant predictor at step 0)."""
    step0 = constant_predictions(dataset_runs(store, dataset, include_censored))
    if step0.empty:
        raise ValueError(f"dataset {dataset!r} has no training runs to take the constant reference's median from")
    return float(step0["predicted"].iloc[0])


def builtin_trace_files() -> list[Path]:
    """The traces shipped in ``data/traces`` (profiles such as Splitwise's are not traces)."""
    return trace_files(SHIPPED_TRACES)


def result_key(trace: pd.DataFrame, spec: PredictorSpec, config: SimConfig, short_quantile: float) -> dict:
    return {"trace": trace_hash(trace), "predictor": spec.key(), "config": config.to_dict(),
            "short_quantile": short_quantile}


def simulation_payload(trace: pd.DataFrame, predictor, config: SimConfig, short_quantile: float, label: str,
                       on_progress: Progress = no_progress) -> dict:
    """Simulate one configuration and return what the store keeps of it (no store needed: Ray tasks run this)."""
    result = simulate(trace, predictor, config, on_progress=on_progress)
    lat = request_latencies(result, short_quantile)
    if len(lat) > MAX_STORED_REQUESTS:
        lat = lat.sample(n=MAX_STORED_REQUESTS, random_state=0).sort_values("rid")
    return {"summary": {**summarize(result, short_quantile), **read_stages(result).to_summary(), "predictor": label},
            "requests": lat[REQUEST_COLUMNS].to_dict(orient="list"),
            "load": instance_load(result).to_dict(orient="list")}


def run_simulation(store: Store, trace: pd.DataFrame, spec: PredictorSpec, config: SimConfig,
                   short_quantile: float = 0.5, on_progress: Progress = no_progress,
                   use_cache: bool = True) -> Outcome:
    """Simulate (or fetch from the store) one configuration on one trace."""
    key = result_key(trace, spec, config, short_quantile)
    payload, cached = store.memo_entry(
        RESULT_KIND, key, lambda: simulation_payload(trace, build_predictor(store, spec, trace), config,
                                                     short_quantile, spec.label(), on_progress),
        name=f"{config.label()} | {spec.label()}", refresh=not use_cache)
    return Outcome.from_payload(payload, cached)


def outlets_trace(trace: pd.DataFrame, qps: float = OUTLETS_SERVING["qps"], seed: int = 0,
                  n_requests: int = OUTLETS_SERVING["requests"], min_output_tokens: int | None = None,
                  workload: str = "uniform") -> tuple[pd.DataFrame, str]:
    """The OUTLETS workload shape from any trace: its requests with prompts <= 50 tokens (and outputs >=
    ``min_output_tokens``) are the pool; ``n_requests`` are drawn from a bootstrap resample of the pool as
    ``workload`` says (:func:`draw_requests`, seeded), Poisson at ``qps``. Returns the trace and a note saying how it
    was built (runs cut at the token cap are counted: at least that long, replayed as that long)."""
    pool = filter_trace(trace, max_prompt_tokens=OUTLETS_SERVING["max_prompt_tokens"])
    if min_output_tokens:
        pool = pool[pool["output_tokens"] >= min_output_tokens]
        if pool.empty:
            raise ValueError(f"no request has a prompt <= {OUTLETS_SERVING['max_prompt_tokens']} tokens and an output "
                             f">= {min_output_tokens} tokens; lower the minimum output or pick another trace")
    picked = draw_requests(pool, n_requests, seed, workload)
    outputs = f" and outputs >= {min_output_tokens} tokens" if min_output_tokens else ""
    how = "in proportion to their output length" if workload == "decode-bound" else "uniformly"
    note = (f"{n_requests} requests drawn {how} from a bootstrap resample of the {len(pool)} requests with prompts <= "
            f"{OUTLETS_SERVING['max_prompt_tokens']} tokens{outputs}, Poisson arrivals at {qps:g} QPS (mean prompt "
            f"{picked['prompt_tokens'].mean():.0f}, mean output {picked['output_tokens'].mean():.0f} tokens")
    if "censored" in picked and picked["censored"].any():
        cut = picked[picked["censored"]]
        note += (f"; {len(cut)} of them cut at the token cap, i.e. at least {cut['output_tokens'].min()} tokens, "
                 "replayed as that long")
    return poisson_retime(picked, qps, seed), note + ")"


def stage_capacity(trace: pd.DataFrame, config: SimConfig) -> tuple[float, float]:
    """The cluster's estimated request capacity (requests per second) of its prefill and its decode stage for this
    trace's mean lengths.

    Decode: every decode instance running full batches of the mean request (context = mean prompt + half the mean
    output); prefill: full prefill batches (token budget) of mean prompts. Colocated instances share both, so the two
    times add up and both numbers are the instances' combined capacity."""
    prompt, output = float(trace["prompt_tokens"].mean()), float(trace["output_tokens"].mean())
    size = config.max_batch_size
    step = config.cost.decode.step_s(size, size, size * (prompt + output / 2))
    decode_s = step * output / size  # instance-seconds of decoding per request
    per_batch = max(1.0, min(size, config.max_prefill_tokens / prompt))
    prefill_s = config.cost.prefill.step_s(per_batch * prompt, per_batch, 0) / per_batch
    if config.mode == "colocated":
        both = config.n_decode / (decode_s + prefill_s)
        return both, both
    return config.n_prefill / prefill_s, config.n_decode / decode_s


def saturating_qps(trace: pd.DataFrame, config: SimConfig, factor: float = 4.0) -> float:
    """``factor`` times the cluster's estimated request capacity for this trace's mean lengths (the smaller of its
    stages' capacities, :func:`stage_capacity`)."""
    return factor * min(stage_capacity(trace, config))


@dataclass(frozen=True)
class Opening:
    """The playground's first-open example: a loaded, decode-bound cluster, chosen by measurement (README, *Scheduler
    playground*). The first ``first_n`` requests of a shipped trace, Poisson arrivals at ``qps``, on ``n_prefill``
    prefill + ``n_decode`` decode instances: about 1.1x the decode stage's estimated capacity, so requests queue for
    decode slots and the order of that queue decides who waits."""

    file: str = "AzureLLMInferenceTrace_conv.csv"
    first_n: int = 2000
    qps: float = 27.0
    n_prefill: int = 2
    n_decode: int = 1

    def label(self) -> str:
        return f"Loaded example: {self.file}, first {self.first_n:,} requests at {self.qps:g} QPS"

    def note(self) -> str:
        return (f"Loaded example: the first {self.first_n:,} requests of {self.file} with Poisson arrivals at "
                f"{self.qps:g} QPS, meant for {self.n_prefill} prefill + {self.n_decode} decode instance(s) (the "
                "cluster's defaults): the decode stage is the bottleneck.")


OPENING = Opening()


def opening_trace(opening: Opening = OPENING) -> pd.DataFrame:
    """The trace of the first-open example (its note in ``attrs["notes"]``)."""
    trace = filter_trace(load_trace_file(SHIPPED_TRACES / opening.file), first_n=opening.first_n)
    trace = poisson_retime(trace, opening.qps)
    trace.attrs["notes"] = [opening.note()]
    return trace


def outlets_configs(base: SimConfig = SimConfig()) -> list[SimConfig]:
    """RR+FCFS, RR+SJF and LB+SJF on 1 prefill + 3 decode instances."""
    return [base.with_(mode="disaggregated", n_prefill=1, n_decode=3, batching="continuous", chunk_tokens=None,
                       dispatch=d, queue=q) for d, q in OUTLETS_POLICIES]


@dataclass
class PresetOutcome:
    """The OUTLETS preset: the chosen predictor's outcome per policy pair (RR+FCFS first) of the first seed, how the
    workload was built, the chosen predictor's mean short-request P99 change over seeds of each other pair against
    RR+FCFS, and per seed, predictor (the chosen one and the references) and pair the headline metrics
    (:data:`PRESET_METRICS`, and ``short_p99_change``)."""

    outcomes: list[Outcome]
    note: str
    changes: dict[str, float]
    per_seed: pd.DataFrame = field(default_factory=pd.DataFrame)


PRESET_METRICS = ("short_e2e_p99_s", "all_e2e_p99_s", "mean_jct_s")
ORACLE = PredictorSpec(kind="oracle")


def policy_label(dispatch: str, queue: str) -> str:
    return f"{dispatch.upper()}+{queue.upper()}"


def preset_predictors(spec: PredictorSpec, constant: float) -> list[PredictorSpec]:
    """The chosen predictor, then the references it is not: the oracle (true lengths, the ceiling) and a constant of
    ``constant`` tokens (no information: SJF has nothing to order by, the floor)."""
    references = [ORACLE, PredictorSpec(kind="constant", constant=float(constant))]
    return [spec] + [r for r in references if r.label() != spec.label()]


def outlets_preset(store: Store, trace: pd.DataFrame, spec: PredictorSpec, base: SimConfig = SimConfig(),
                   n_requests: int = OUTLETS_SERVING["requests"], qps: float | None = None,
                   short_quantile: float = 0.5, on_progress: Progress = no_progress, seeds: int = PRESET_SEEDS,
                   min_output_tokens: int | None = None, workload: str = "uniform",
                   constant: float | None = None) -> PresetOutcome:
    """Run RR+FCFS, RR+SJF and LB+SJF on the OUTLETS workload shape built from ``trace`` (:func:`outlets_trace`)
    with ``spec``'s predictor and the references of :func:`preset_predictors` (``constant`` None: the median output
    length of ``trace``); ``qps`` None saturates the cluster (4x its estimated capacity for the first seed's
    lengths). Seeds 0 .. ``seeds`` - 1 each draw a new pool, requests and arrivals, which every predictor and pair
    share, and offset the predictors' and the config's seeds (noise, random dispatch). Every run is memoised."""
    if seeds < 1:
        raise ValueError("the preset needs at least one seed")
    configs = outlets_configs(base)
    if qps is None:
        qps = saturating_qps(outlets_trace(trace, 1.0, 0, n_requests, min_output_tokens, workload)[0], configs[0])
    predictors = preset_predictors(spec, float(trace["output_tokens"].median()) if constant is None else constant)
    rows, first, mean_outputs = [], None, []
    for seed in range(seeds):
        shaped, note = outlets_trace(trace, qps, seed, n_requests, min_output_tokens, workload)
        mean_outputs.append(float(shaped["output_tokens"].mean()))
        for predictor in predictors:
            outcomes = [run_simulation(store, shaped, replace(predictor, seed=predictor.seed + seed),
                                       config.with_(seed=config.seed + seed), short_quantile) for config in configs]
            rows += [{"seed": seed, "predictor": predictor.label(), "policy": policy_label(d, q),
                      **{m: o.summary[m] for m in PRESET_METRICS}, "short_p99_change": short_p99_change(outcomes[0], o)}
                     for (d, q), o in zip(OUTLETS_POLICIES, outcomes)]
            first = first or (outcomes, note)
        on_progress(seed + 1, seeds, "seeds")
    outcomes, note = first
    per_seed = pd.DataFrame(rows)
    chosen = per_seed[(per_seed["predictor"] == spec.label()) & (per_seed["policy"] != per_seed["policy"].iloc[0])]
    changes = chosen.groupby("policy", sort=False)["short_p99_change"].mean().to_dict()
    if seeds > 1:
        paper = OUTLETS_SERVING["mean_output_tokens"]
        note += (f"; seeds 0-{seeds - 1}, each a new pool, draw and arrivals (mean output "
                 f"{np.mean(mean_outputs):.0f} tokens; the paper's workload: {paper:,})")
    return PresetOutcome(outcomes, note, changes, per_seed)


def preset_seed_table(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per predictor and policy pair (in the order of ``per_seed``): the mean over seeds of each metric of
    :data:`PRESET_METRICS`, of the short-request P99 change vs RR+FCFS and of the share of the oracle's cut the
    predictor achieves (per seed, its change over the oracle's for the same pair; none for RR+FCFS), with 95%
    Student-t intervals over seeds (:func:`t_interval`); changes and shares are paired by seed."""
    baseline = per_seed["policy"].iloc[0]
    oracle = per_seed[per_seed["predictor"] == ORACLE.label()].set_index(["seed", "policy"])["short_p99_change"]
    paired = oracle.reindex(pd.MultiIndex.from_frame(per_seed[["seed", "policy"]])).to_numpy()
    frame = per_seed.assign(oracle_share=np.where(per_seed["policy"] == baseline, np.nan,
                                                  per_seed["short_p99_change"] / paired))
    rows = []
    for (predictor, policy), group in frame.groupby(["predictor", "policy"], sort=False):
        row: dict = {"predictor": predictor, "policy": policy, "seeds": len(group)}
        for metric in (*PRESET_METRICS, "short_p99_change", "oracle_share"):
            est = t_interval(group[metric].dropna())
            row.update({metric: est.value, f"{metric}_lo": est.lo, f"{metric}_hi": est.hi})
        rows.append(row)
    return pd.DataFrame(rows)


# metric, label, scale, signed, decimals
SEED_COLUMNS = (("short_e2e_p99_s", "short P99 (s)", 1, False, 2), ("all_e2e_p99_s", "all P99 (s)", 1, False, 2),
                ("mean_jct_s", "mean JCT (s)", 1, False, 2),
                ("short_p99_change", "short P99 vs RR+FCFS (%)", 100, True, 1),
                ("oracle_share", "share of the oracle's cut (%)", 100, False, 0))


def _interval_text(value: float, lo: float, hi: float, scale: float, signed: bool, digits: int) -> str:
    """``mean [lo, hi]`` scaled; the mean alone without an interval, nothing without a mean."""
    if np.isnan(value):
        return ""
    if np.isnan(lo):
        return f"{scale * value:{'+' if signed else ''}.{digits}f}"
    return ci_text(scale * value, scale * lo, scale * hi, signed=signed, digits=digits)


def format_seed_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`preset_seed_table` as text: ``mean [lo, hi]`` per metric."""
    shown = table[["predictor", "policy", "seeds"]].copy()
    for metric, label, *style in SEED_COLUMNS:
        shown[label] = [_interval_text(v, lo, hi, *style)
                        for v, lo, hi in table[[metric, f"{metric}_lo", f"{metric}_hi"]].to_numpy()]
    return shown


def reference_rows(shown: pd.DataFrame) -> pd.DataFrame:
    """The SJF rows of :func:`format_seed_table` with the change vs RR+FCFS and the share of the oracle's cut:
    where the chosen predictor sits between the constant (floor) and the oracle (ceiling)."""
    return shown[shown["policy"] != shown["policy"].iloc[0]][
        ["predictor", "policy", "seeds", SEED_COLUMNS[3][1], SEED_COLUMNS[4][1]]].reset_index(drop=True)


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
        maes = NOISE_MAE.parse_list(text)
    except ValueError as exc:
        raise ValueError(f"MAE values: {exc}") from None
    if not maes:
        raise ValueError("give at least one MAE value")
    return [float(m) for m in maes]


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
