"""``lenscope qps-sweep`` (latency against offered load for several policies, and where each saturates) and
``lenscope outlets-preset`` (RR+FCFS vs RR+SJF vs LB+SJF on the OUTLETS workload over seeds, with CIs, beside the
oracle and a constant predictor on the same requests)."""

from __future__ import annotations

import argparse

from lenscope.analysis.scheduler.engine import QPS
from lenscope.analysis.scheduler.traces import WORKLOADS
from lenscope.cli._common import (
    PhaseBars,
    add_output_args,
    add_ray_args,
    non_negative_int,
    number,
    numbers,
    positive_int,
    ray_options,
    shows_text,
    write_data,
)
from lenscope.cli.scheduler import (
    add_cluster_args,
    add_predictor_args,
    add_short_quantile_arg,
    add_trace_args,
    config_from,
    cost_from,
    spec_from,
    trace_from,
)


def register(subparsers) -> None:
    p = subparsers.add_parser("qps-sweep", help="latency vs offered load (Poisson QPS) of several policies on one "
                              "trace, and where each saturates")
    add_trace_args(p)
    p.add_argument("--policies", default="rr+fcfs,rr+sjf,lb+sjf", help="comma-separated DISPATCH+QUEUE pairs "
                   "(default rr+fcfs,rr+sjf,lb+sjf); the other cluster options apply to all")
    p.add_argument("--qps-values", type=numbers(QPS), metavar="Q1,Q2,...", help="offered loads (default: 0.25 to "
                   "1.5 times the cluster's estimated capacity for this trace)")
    add_cluster_args(p, policies=False)
    add_predictor_args(p)
    add_short_quantile_arg(p)
    add_output_args(p, "the sweep table (one row per policy and QPS)",
                    "the sweep table's rows and, per policy, the lowest QPS that saturated it")
    add_ray_args(p, "simulate the sweep's points")
    p.set_defaults(func=run, qps=None, dispatch="rr", queue="fcfs")

    o = subparsers.add_parser("outlets-preset", help="the OUTLETS preset: RR+FCFS, RR+SJF and LB+SJF on 1 prefill + "
                              "3 decode instances, short prompts (and long outputs), over seeds with 95%% t "
                              "intervals, with the oracle and a constant predictor as references")
    add_trace_args(o)
    o.add_argument("--requests", type=positive_int, default=1914, help="requests drawn from the trace (default 1914)")
    o.add_argument("--qps", type=number(QPS), help="offered load (default: 4x the cluster's estimated capacity)")
    o.add_argument("--seeds", type=positive_int, help="seeds 0..N-1, each a new bootstrap pool of the trace's "
                   "requests, draw, arrivals and predictor noise (default: the preset's 20)")
    o.add_argument("--min-output-tokens", type=non_negative_int, default=100, help="keep outputs of at least this "
                   "many tokens (default 100; 0 keeps all)")
    o.add_argument("--workload", choices=WORKLOADS, default="uniform", help="draw the requests uniformly, or "
                   "decode-bound: in proportion to their output length (default uniform)")
    add_predictor_args(o)
    add_short_quantile_arg(o)
    add_output_args(o, "per predictor and policy pair, each metric's mean over seeds with its 95%% t interval",
                    "the same summary, every seed's metrics and how the workload was built")
    o.set_defaults(func=run_preset)


def run(args: argparse.Namespace) -> int:
    from lenscope.jobs.scheduler.qps_sweep import (
        SATURATION_GROWTH,
        SATURATION_SERVED,
        default_qps,
        parse_policies,
        qps_sweep,
        saturation_points,
        saturation_text,
    )
    from lenscope.store.store import Store

    base = config_from(args)  # (a bad --cost-json or cluster is refused before the store or trace is opened)
    policies = parse_policies(args.policies)
    store = Store()
    if args.dataset:
        args.qps = 1.0  # the app's runs get arrivals here; every sweep point re-times them
    trace = trace_from(args, store)
    spec = spec_from(args, store)
    qps_values = sorted(set(args.qps_values)) if args.qps_values else default_qps(trace, base)
    with PhaseBars() as bars:
        sweep = qps_sweep(store, trace, spec, base, policies, qps_values, args.seed, args.short_quantile, bars,
                          ray_options(args))
    cluster = base.label().split(" ", 1)[1]
    points = saturation_points(sweep)
    if shows_text(args):
        print(f"{len(trace)} requests | {spec.label()} | cluster {cluster}")
        table = sweep[["policy", "qps", "mean_jct_s", "all_e2e_p50_s", "all_e2e_p99_s", "short_e2e_p99_s",
                       "all_ttft_p99_s", "throughput_tok_s", "backlog_growth", "served_fraction", "saturated"]]
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print(f"saturated: the last quarter of arrivals finds > {SATURATION_GROWTH:g} x as many requests in the "
              f"system as the second quarter, and the served rate is < {SATURATION_SERVED:g} x the offered one")
        for line in saturation_text(points, qps_values):
            print(f"  {line}")
    document = {"requests": len(trace), "predictor": spec.label(), "cluster": cluster, "qps": qps_values,
                "saturates_at_qps": points, "rows": sweep}
    write_data(args, sweep, document, what="sweep table")
    return 0


def run_preset(args: argparse.Namespace) -> int:
    from lenscope.analysis.scheduler.engine import SimConfig
    from lenscope.jobs.scheduler.replay import (
        PRESET_SEEDS,
        format_seed_table,
        outlets_preset,
        preset_seed_table,
        training_median,
    )
    from lenscope.store.store import Store

    seeds = PRESET_SEEDS if args.seeds is None else args.seeds
    config = SimConfig(cost=cost_from(args), seed=args.seed)  # (checked before the store or trace is opened)
    store = Store()
    qps, args.qps = args.qps, 1.0 if args.dataset else None  # the trace's own arrivals are replaced anyway
    trace = trace_from(args, store)
    spec = spec_from(args, store)
    if args.dataset:
        constant = training_median(store, args.dataset)
        source = f"the median output length of the training runs of {args.dataset}"
        print("note: runs cut at the token cap are left out (predictors trained on finished runs do not predict them)")
    else:
        constant = float(trace["output_tokens"].median())
        source = "the median output length of the trace"
    with PhaseBars() as bars:
        preset = outlets_preset(store, trace, spec, config, args.requests, qps,
                                args.short_quantile, bars, seeds, args.min_output_tokens or None, args.workload,
                                constant)
    summary = preset_seed_table(preset.per_seed)
    if shows_text(args):
        print(f"OUTLETS preset | {spec.label()} | {args.workload} workload: {preset.note}")
        print(f"references on the same requests and arrivals: oracle (the true lengths) and constant {constant:g} "
              f"({source})")
        print(format_seed_table(summary).to_string(index=False))
        print(f"means over seeds [95% Student-t interval over n = {seeds} seeds]; changes and shares of the oracle's "
              "cut paired by seed")
    document = {"predictor": spec.label(), "workload": args.workload, "note": preset.note, "seeds": seeds,
                "constant_length": constant, "constant_source": source,  # the references: it and the oracle
                "summary": summary, "per_seed": preset.per_seed}
    write_data(args, summary, document, what="preset table")
    return 0
