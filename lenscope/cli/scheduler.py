"""``lenscope simulate`` (replay a trace through a simulated cluster), ``lenscope evaluate-predictions`` (an
external predictor's file) and ``lenscope calibrate-cost``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lenscope.analysis.scheduler.engine import BATCHING, CONFIG_RANGES, MODES, QPS, SHORT_QUANTILE
from lenscope.analysis.scheduler.predictors import NOISE_MAE, PREDICTIONS_FILE
from lenscope.analysis.scheduler.registry import (
    DISPATCH_POLICIES,
    PREDICTORS,
    PREFILL_QUEUE_POLICIES,
    QUEUE_POLICIES,
    kinds_taking,
    predictor_kind,
    predictor_options,
)
from lenscope.analysis.scheduler.traces import TIME_UNITS
from lenscope.cli._common import (
    NOTHING_WRITTEN,
    PhaseBars,
    add_output_args,
    add_ray_args,
    dataset_arg,
    number,
    numbers,
    output_file,
    positive_int,
    ray_options,
    seed,
    shows_text,
    write_data,
)
from lenscope.models.atomic_files import write_text
from lenscope.models.numbers import SEED

# Predictor options whose flag is not a number: the flag's type, and how its value becomes the option's (an imported
# predictions file's digest); the others are numbers in their option's range.
FLAG_TYPES = {PREDICTIONS_FILE: Path}


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="replay a request trace through a simulated serving cluster")
    add_trace_args(p)
    p.add_argument("--qps", type=number(QPS), help="re-time arrivals as a Poisson process at this rate")
    add_cluster_args(p)
    add_predictor_args(p)
    add_short_quantile_arg(p)
    add_output_args(p, "the per-request latencies (with --sweep: the grid's table)",
                    "the summary: latency percentiles of all, short and long requests, throughput, the cluster and "
                    "predictor (with --sweep: the grid's table)")
    p.add_argument("--no-cache", action="store_true", help="recompute even if the store has the result")
    add_sweep_args(p)
    p.set_defaults(func=run)

    e = subparsers.add_parser("evaluate-predictions", help="evaluate an external predictor's (true length, "
                              "prediction) pairs: MAE and Kendall tau with 95%% bootstrap CIs, per-bucket confusion")
    e.add_argument("path", type=Path, help="CSV or JSON lines whose parse fits in memory (up to 1/32 of the memory "
                   "left), with a true-length column (true_tokens, true_length, true or output_tokens) and a "
                   "prediction column (predicted_tokens, predicted_length, predicted, prediction; or predicted_class, "
                   "predicted_bucket, class, bucket for class indices, or any with --classes)")
    _add_predictions_args(e)
    add_output_args(e, "the confusion counts (rows: true-length bucket, columns: predicted)",
                    "n, MAE and Kendall tau with their 95%% CIs, and the confusion counts")
    e.set_defaults(func=evaluate, interrupt_note=NOTHING_WRITTEN)  # its result is stored when it ends

    c = subparsers.add_parser("calibrate-cost", help="fit the simulator's cost model to a latency profile")
    c.add_argument("--profile", type=Path, required=True, help="Splitwise-style perf model CSV")
    c.add_argument("--model", help="model name in the profile (omit to list configurations)")
    c.add_argument("--hardware", help="hardware name in the profile (with --model)")
    c.add_argument("--tp", type=positive_int, help="tensor parallel degree")
    c.add_argument("--out", type=output_file, help="write the fitted cost model as JSON")
    c.set_defaults(func=calibrate, interrupt_note=NOTHING_WRITTEN)


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    """``--sweep`` and its axes: a grid of simulations instead of one, fanned out on Ray with ``--ray``."""
    g = p.add_argument_group("sweep", "--sweep simulates every point of QPS x policy x predictor x noise x seed (each "
                             "point stored once; the other options fix the rest of the cluster)")
    g.add_argument("--sweep", action="store_true", help="simulate a grid and print one table")
    g.add_argument("--sweep-qps", type=numbers(QPS), default=[], metavar="Q1,Q2,...",
                   help="offered loads (Poisson arrivals)")
    g.add_argument("--policies", default="rr+fcfs,rr+sjf,lb+sjf", metavar="DISPATCH+QUEUE,...",
                   help="dispatch+queue policy pairs (see --dispatch and --queue)")
    g.add_argument("--predictors", default="", metavar="KIND,...",
                   help="predictor kinds (default: --predictor); their parameters come from the predictor options")
    g.add_argument("--maes", type=numbers(NOISE_MAE), default=[], metavar="M1,M2,...",
                   help="noise levels of oracle-noise (default: --noise-mae)")
    g.add_argument("--seeds", type=numbers(SEED), default=[], metavar="S1,S2,...",
                   help="seeds of arrivals and noise (default: --seed)")
    add_ray_args(g, "simulate the sweep's points")


def add_trace_args(p: argparse.ArgumentParser) -> None:
    """Where the trace comes from and how it is read and filtered."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="trace file: CSV (Azure 2023/2024, BurstGPT, LLMServingSim, Vidur, "
                     "arrival,prompt_tokens,output_tokens), Mooncake JSON lines, or a vLLM / SGLang benchmark result "
                     "(JSON / JSON lines with input_lens, output_lens); others with --columns")
    src.add_argument("--dataset", type=dataset_arg,
                     help="use the app's runs of this dataset (needs --qps; censored runs left out)")
    p.add_argument("--columns", help="read --trace (CSV or JSON lines) through this column mapping: "
                   "arrival=COL,prompt=COL,output=COL[,hash_ids=COL][,predicted=COL]")
    p.add_argument("--time-unit", choices=list(TIME_UNITS),
                   help="unit of the mapped arrival column (default s; datetime = timestamps)")
    p.add_argument("--split", choices=["test", "all"], default="test",
                   help="runs of --dataset to replay: test (default; out of sample for every trained predictor) or "
                        "all (oracle and constant predictors only)")
    p.add_argument("--max-prompt-tokens", type=positive_int, help="leave out requests with longer prompts")
    p.add_argument("--first-n", type=positive_int, help="replay only the first N requests (after the filter)")


def add_cluster_args(p: argparse.ArgumentParser, policies: bool = True) -> None:
    """Cluster shape, engine limits and policies (``SimConfig`` fields; without ``policies``, dispatch and queue are
    left to the command); each number flag takes the range of its ``SimConfig`` field."""
    def field(name: str):
        return number(CONFIG_RANGES[name])

    p.add_argument("--mode", choices=MODES, default="disaggregated",
                   help="disaggregated: prefill and decode on separate instances (KV cache moved between them); "
                        "colocated: each instance does both")
    p.add_argument("--n-prefill", type=field("n_prefill"), default=1, help="prefill instances (disaggregated mode)")
    p.add_argument("--n-decode", type=field("n_decode"), default=3,
                   help="decode instances (colocated mode: instances)")
    p.add_argument("--batching", choices=BATCHING, default="continuous",
                   help="continuous: requests join and leave the running batch every iteration; static: a batch runs "
                        "until its longest request ends")
    p.add_argument("--max-batch-size", type=field("max_batch_size"), default=256,
                   help="requests decoded at once per instance")
    p.add_argument("--kv-capacity", type=field("kv_capacity_tokens"), default=262_144,
                   help="KV-cache tokens per decode instance")
    if policies:
        p.add_argument("--dispatch", choices=DISPATCH_POLICIES.names(), default="rr",
                       help=DISPATCH_POLICIES.describe())
        p.add_argument("--queue", choices=QUEUE_POLICIES.names(), default="fcfs", help=QUEUE_POLICIES.describe())
    p.add_argument("--aging-s", type=field("aging_s"), help="starvation guard: serve requests waiting this long first")
    p.add_argument("--chunk-tokens", type=field("chunk_tokens"), metavar="BUDGET", help="chunked prefill: a token "
                   "budget per iteration mixing prefill chunks and decodes (colocated mode; at least "
                   "--max-batch-size)")
    p.add_argument("--prefix-cache-tokens", type=field("prefix_cache_tokens"), metavar="TOKENS",
                   help="prefix caching: an LRU cache of prompt KV blocks of this many tokens per prefilling instance, "
                        "from the trace's hash_ids (Mooncake); --dispatch prefix routes requests to the instance "
                        "caching most of their prompt")
    p.add_argument("--hash-block-tokens", type=field("hash_block_tokens"), default=512,
                   help="prompt tokens per block hash (Mooncake: 512)")
    p.add_argument("--prefill-queue", choices=PREFILL_QUEUE_POLICIES.names(), default="fcfs",
                   help="order of the prefill instances' queue (disaggregated mode): "
                        + PREFILL_QUEUE_POLICIES.describe())
    p.add_argument("--preemptive", action="store_true", help="the decode queue policy preempts running requests "
                   "for waiting ones with a smaller key (preemptive SRPT with --queue srpt)")
    p.add_argument("--preempt-limit", type=field("preempt_limit"), metavar="C", help="TRAIL guard: preempt a request "
                   "only while it has generated fewer than C x its initial predicted length (with --preemptive)")
    p.add_argument("--max-preemptions", type=field("max_preemptions"), metavar="N",
                   help="preempt a request at most N times (with --preemptive)")


def add_predictor_args(p: argparse.ArgumentParser) -> None:
    """The predictor the policies see, the cost model and the seed."""
    p.add_argument("--predictor", choices=PREDICTORS.names(), default="oracle",
                   help="the length predictor the policies see (default: %(default)s):\n"
                        + "\n".join(f"  {name}: {PREDICTORS.description(name)}" for name in PREDICTORS.names()))
    for name, option in predictor_options().items():  # every kind's options, one flag each (read by spec_from)
        if option.flag is not None:
            file = option.source in FLAG_TYPES
            p.add_argument(option.flag, dest=name, type=FLAG_TYPES.get(option.source) or number(option.valid),
                           default=option.ask,
                           metavar="PATH" if file else option.flag.lstrip("-").replace("-", "_").upper(),
                           help=f"{option.help} (with --predictor {' or '.join(kinds_taking(name))})")
    _add_predictions_args(p)
    p.add_argument("--cost-json", type=Path, help="cost model from `lenscope calibrate-cost --out`")
    p.add_argument("--seed", type=seed, default=0, help="seed of arrivals (--qps), noise and draws")


def add_short_quantile_arg(p: argparse.ArgumentParser) -> None:
    """``--short-quantile``: where short requests end and long ones begin, for the per-group latencies."""
    p.add_argument("--short-quantile", type=number(SHORT_QUANTILE), default=0.5,
                   help="requests with an output length up to this quantile of the trace's count as short (their "
                        "latencies reported apart)")


def _add_predictions_args(parser: argparse.ArgumentParser) -> None:
    """How to read a predictions file: its columns, whether predictions are class indices, the classes' edges."""
    parser.add_argument("--prediction-columns", default="", metavar="true=COL,predicted=COL",
                        help="columns of the predictions file, when their names are not the usual ones")
    parser.add_argument("--classes", action="store_true", help="predictions are bucket/class indices 0..K-1: "
                        "ranks (SJF needs only their order)")
    parser.add_argument("--bucket-edges", default="", metavar="E0,E1,...,EK",
                        help="token edges of the K classes (implies --classes): class k stands for the midpoint of "
                             "[Ek, Ek+1), for MAE and the simulator")


def _read_predictions(args: argparse.Namespace, path: Path, store):
    """The imported predictions file (read whole, whatever its size) and its evaluation's lines; when its token
    predictions look like class indices, a warning naming --classes first and the MAE's line marked."""
    from lenscope.analysis.scheduler.external_predictions import predictions_format
    from lenscope.jobs.scheduler.external_predictions import import_predictions

    fmt = predictions_format(args.prediction_columns, args.classes, args.bucket_edges)
    imported = import_predictions(store, path, fmt, path.name)
    lines = imported.evaluation.lines()
    warning = imported.pairs.class_index_warning()
    if warning:
        print(f"warning: {path.name}: {warning}; if they are class indices, rerun with --classes (ranks: SJF needs "
              "only their order) or --bucket-edges E0,...,EK (the classes' token edges, for an MAE)")
        lines[1] += " (meaningless if the predictions are class indices)"
    return imported, lines


def trace_from(args: argparse.Namespace, store):
    """The trace of ``add_trace_args`` (and ``--qps``, when the parser has it)."""
    from lenscope.analysis.scheduler.traces import column_mapping, filter_trace, load_trace_file, poisson_retime
    from lenscope.jobs.scheduler.replay import dataset_trace

    if args.time_unit and not args.columns:
        raise ValueError("--time-unit goes with --columns (known formats have their own unit)")
    if args.dataset:
        if args.qps is None:
            raise ValueError("--dataset needs --qps (the app's runs have no arrival times)")
        if args.columns:
            raise ValueError("--columns maps the columns of a --trace file")
        trace = dataset_trace(store, args.dataset, args.qps, args.seed, None if args.split == "all" else args.split)
    else:
        trace = load_trace_file(args.trace, column_mapping(args.columns, args.time_unit or "s") if args.columns
                                else None)
        for note in trace.attrs["notes"]:
            print(f"note: {note}")
    trace = filter_trace(trace, args.max_prompt_tokens, args.first_n)
    return poisson_retime(trace, args.qps, args.seed) if args.qps and not args.dataset else trace


def cost_from(args: argparse.Namespace):
    """The cost model of ``--cost-json`` (the default one without); a coefficient out of range is named with the
    file (``costs.json: prefill.a must be a finite number >= 0, not -1``)."""
    from lenscope.analysis.core.safe_files import MAX_CONFIG_BYTES, load_json_file
    from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, CostModel

    if not args.cost_json:
        return DEFAULT_COST
    data = load_json_file(args.cost_json, MAX_CONFIG_BYTES, "cost JSON")  # a regular file, bounded
    try:
        return CostModel.from_dict(data)
    except ValueError as exc:
        raise ValueError(f"--cost-json {args.cost_json}: {exc}") from None


def config_from(args: argparse.Namespace):
    """The ``SimConfig`` of ``add_cluster_args`` (and the cost model and seed of ``add_predictor_args``)."""
    from lenscope.analysis.scheduler.engine import SimConfig

    cost = cost_from(args)
    return SimConfig(mode=args.mode, n_prefill=args.n_prefill, n_decode=args.n_decode, batching=args.batching,
                     max_batch_size=args.max_batch_size, kv_capacity_tokens=args.kv_capacity,
                     dispatch=args.dispatch, queue=args.queue, aging_s=args.aging_s, seed=args.seed, cost=cost,
                     prefill_queue=args.prefill_queue, preemptive=args.preemptive,
                     preempt_limit=args.preempt_limit, max_preemptions=args.max_preemptions,
                     chunk_tokens=args.chunk_tokens, prefix_cache_tokens=args.prefix_cache_tokens,
                     hash_block_tokens=args.hash_block_tokens)


def _imported_digest(args: argparse.Namespace, path: Path, store) -> str:
    """A --predictions file imported into the store (its evaluation's first lines printed): its digest."""
    imported, lines = _read_predictions(args, path, store)
    print(f"predictions {path.name}: " + ", ".join(lines[:3]))
    return imported.key


FLAG_READERS = {PREDICTIONS_FILE: _imported_digest}


def specs_from(args: argparse.Namespace, store, kinds: list[str]) -> list:
    """The ``PredictorSpec`` of each of ``kinds`` from the flags of ``add_predictor_args``: each kind reads the flags
    of its own options (a --predictions file is imported into the store once); a file flag is refused unless a kind
    takes it, and such a kind needs it."""
    from lenscope.jobs.scheduler.replay import PredictorSpec

    values = {}
    for name, option in predictor_options().items():
        if option.flag is None:
            continue
        value, read = getattr(args, name), FLAG_READERS.get(option.source)
        if read is not None:
            wanted = any(predictor_kind(k).options.takes(name) for k in kinds)
            if wanted != (value is not None):
                raise ValueError(f"--predictor {' or '.join(kinds_taking(name))} and {option.flag} PATH go together")
        values[name] = read(args, value, store) if read is not None and value is not None else value
    if args.predictions is None and (args.prediction_columns or args.classes or args.bucket_edges):
        raise ValueError("--prediction-columns, --classes and --bucket-edges read a --predictions file")
    return [PredictorSpec(k, seed=args.seed, **{name: values[name] for name, _ in predictor_kind(k).options.asked()})
            for k in kinds]


def spec_from(args: argparse.Namespace, store):
    """The ``PredictorSpec`` of ``add_predictor_args`` (importing a --predictions file into the store)."""
    return specs_from(args, store, [args.predictor])[0]


def run_sweep(args: argparse.Namespace, store, config) -> int:
    """``simulate --sweep``: the grid's table (and ``--out`` CSV) around the cluster ``config``."""
    from lenscope.jobs.scheduler.grid_sweep import SweepGrid, grid_outcomes, grid_table
    from lenscope.jobs.scheduler.qps_sweep import parse_policies

    if not args.sweep_qps:
        raise ValueError("--sweep needs --sweep-qps Q1,Q2,... (the loads to simulate)")
    if args.qps is None and args.dataset:
        args.qps = 1.0  # the app's runs get arrivals here; every point re-times them
    kinds = [k.strip() for k in (args.predictors or args.predictor).split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(PREDICTORS.names()))
    if unknown:
        raise ValueError(f"unknown predictor(s) {', '.join(unknown)}; choose from {', '.join(PREDICTORS.names())}")
    trace = trace_from(args, store)
    grid = SweepGrid(qps=tuple(sorted(set(args.sweep_qps))), policies=tuple(parse_policies(args.policies)),
                     predictors=tuple(specs_from(args, store, kinds)),
                     maes=tuple(args.maes or (args.mae,)), seeds=tuple(args.seeds or (args.seed,)))
    with PhaseBars() as bars:
        outcomes = grid_outcomes(store, trace, config, grid, args.short_quantile, ray_options(args), bars)
    table = grid_table(grid, outcomes)
    if shows_text(args):
        print(f"{len(table)} points ({sum(o.cached for o in outcomes)} from the store), {len(trace)} requests each")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    write_data(args, table, what="sweep table")
    return 0


def run(args: argparse.Namespace) -> int:
    from lenscope.jobs.scheduler.replay import run_simulation
    from lenscope.store.store import Store

    config = config_from(args)  # (a bad --cost-json or cluster is refused before the store or trace is opened)
    store = Store()
    if args.sweep:
        return run_sweep(args, store, config)
    trace = trace_from(args, store)
    spec = spec_from(args, store)
    with PhaseBars() as bars:
        outcome = run_simulation(store, trace, spec, config, args.short_quantile, on_progress=bars,
                                 use_cache=not args.no_cache)
    s = outcome.summary
    if shows_text(args):
        print(f"{s['label']} | {spec.label()} | {len(trace)} requests{' (cached)' if outcome.cached else ''}")
        for group in ("all", "short", "long"):
            print(f"  {group:5s} e2e P50/P90/P99 s: "
                  + " / ".join(f"{s[f'{group}_e2e_p{p}_s']:.2f}" for p in (50, 90, 99))
                  + f"   TTFT P99 {s[f'{group}_ttft_p99_s']:.3f} s   TPOT P50 {s[f'{group}_tpot_p50_s'] * 1e3:.1f} ms")
        print(f"  throughput {s['throughput_tok_s']:.0f} tok/s, mean JCT {s['mean_jct_s']:.2f} s, "
              f"padding {s['padding_ratio']:.3f}, preemptions {s['preemptions']}"
              + (f", prefix cache hits {s['prefix_hit_rate']:.1%} of prompt tokens" if config.prefix_cache_tokens
                 else ""))
    document = {"cluster": s["label"], "predictor": spec.label(), "requests": len(trace), "cached": outcome.cached,
                "short_quantile": args.short_quantile, "summary": s}
    write_data(args, outcome.requests, document, what="per-request latencies")
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from lenscope.store.store import Store

    imported, lines = _read_predictions(args, args.path, Store())
    pairs, evaluation = imported.pairs, imported.evaluation
    kind = ("token lengths" if not pairs.classes else "class indices, ranks only" if pairs.bucket_edges is None
            else "class indices, bucket midpoints for MAE")
    if shows_text(args):
        print(f"{args.path.name}: predictions as {kind}")
        for line in lines:
            print(f"  {line}")
        print("  confusion (rows: true-length bucket, columns: predicted):")
        print("\n".join(f"    {row}" for row in evaluation.confusion.to_string().splitlines()))
        options = "".join(f" --{flag} {value}" for flag, value in [("prediction-columns", args.prediction_columns),
                                                                      ("bucket-edges", args.bucket_edges)] if value)
        print(f"  simulate with it: python -m lenscope simulate --trace ... --predictor empirical --predictions "
              f"{args.path}{' --classes' if args.classes else ''}{options}")

    def estimate(e) -> dict | None:
        return None if e is None else {"value": e.value, "lo": e.lo, "hi": e.hi}

    confusion = evaluation.confusion.rename_axis(index="true length", columns=None).reset_index()
    document = {"file": args.path.name, "predictions": kind, "n": evaluation.n, "mae": estimate(evaluation.mae),
                "kendall_tau": estimate(evaluation.kendall_tau), "n_boot": evaluation.n_boot,
                "warning": pairs.class_index_warning(), "confusion": confusion}
    write_data(args, confusion, document, what="confusion counts")
    return 0


def calibrate(args: argparse.Namespace) -> int:
    from lenscope.analysis.core.safe_files import read_csv_file
    from lenscope.analysis.scheduler.cost_model import fit_cost_model, profile_configs

    profile = read_csv_file(args.profile, "profile CSV")  # a regular file, bounded
    if args.model is None:
        print(profile_configs(profile).to_string(index=False))
        return 0
    if args.hardware is None or args.tp is None:
        raise ValueError("--model needs --hardware and --tp")
    fit = fit_cost_model(profile, args.model, args.hardware, args.tp)
    print(json.dumps(fit.cost.to_dict(), indent=2))
    print(f"fit on {fit.n_rows} rows: prefill MAPE {fit.prefill_mape:.1%}, decode MAPE {fit.decode_mape:.1%}")
    if args.out:
        write_text(args.out, json.dumps(fit.cost.to_dict(), indent=2))
        print(f"cost model -> {args.out} (use with `lenscope simulate --cost-json {args.out}`)")
    return 0
