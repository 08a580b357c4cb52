"""``lenscope claims`` and ``lenscope report``: a study's claims judged with paired CIs, and the whole study as
one offline HTML file."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from lenscope.cli._common import (
    NOTHING_WRITTEN,
    PhaseBars,
    add_dataset_arg,
    add_model_args,
    add_output_args,
    load_target,
    non_negative_int,
    number,
    output_file,
    positive_int,
    shows_text,
    write_data,
)
from lenscope.models.atomic_files import write_text
from lenscope.models.numbers import Range


def _dataset_args(p: argparse.ArgumentParser) -> None:
    add_dataset_arg(p)
    p.add_argument("--layer", type=non_negative_int, default=None,
                   help="layer of the EGTP heads and PLP (default: the dataset's last recorded layer)")
    p.add_argument("--probe-layer", type=non_negative_int, default=None, help="default: half the head layer")


def register(subparsers) -> None:
    p = subparsers.add_parser("claims", help="judge the papers' claims on out-of-fold predictions of grouped "
                                             "cross-validation (training seeds, Holm-adjusted CIs, effect-size "
                                             "verdicts; markdown tables); stored folds and seeds are reused")
    _dataset_args(p)
    add_model_args(p)
    p.add_argument("--folds", type=number(Range(2, integral=True)), default=5,
                   help="K of grouped K-fold cross-validation (default 5)")
    p.add_argument("--seeds", type=positive_int, default=3,
                   help="training seeds per predictor and fold (default 3; deterministic ones get 1)")
    p.add_argument("--no-pia", action="store_true", help="leave out PiA (it asks the target model)")
    add_output_args(p, "every claim's row, on all runs and per scenario (column scope)",
                    "the claims on all runs and per scenario, each predictor's out-of-fold MAE, the head options, "
                    "what was not cross-validated and the dataset's counts")
    p.set_defaults(func=run_claims)
    p = subparsers.add_parser("report", help="write a study's tables and figures as one HTML file that opens "
                                             "offline")
    _dataset_args(p)
    p.add_argument("--out", type=output_file, default=None, help="default: lenscope-report-<dataset>.html")
    p.set_defaults(func=run_report, interrupt_note=NOTHING_WRITTEN)


def _resolve(args: argparse.Namespace):
    from lenscope.jobs.study.results import study_layers
    from lenscope.store.store import Store

    store = Store()
    layer = study_layers(store, args.dataset)[0] if args.layer is None else args.layer
    return store, args.dataset, layer, layer // 2 if args.probe_layer is None else args.probe_layer


def run_claims(args: argparse.Namespace) -> int:
    from lenscope.jobs.results.claims import claims_markdown, claims_report, head_options_markdown, predictors_markdown
    from lenscope.jobs.runs.datasets import dataset_counts

    store, dataset, layer, probe_layer = _resolve(args)
    target = None if args.no_pia else load_target(args)
    with PhaseBars() as bars:
        report = claims_report(store, dataset, layer, probe_layer, args.folds, args.seeds, target, on_progress=bars)
    counts = dataset_counts(store, dataset, include_censored=True)
    if shows_text(args):
        print(f"dataset {dataset!r}: {counts.caption()}; {args.folds}-fold grouped cross-validation, {args.seeds} "
              "training seeds; every finished run scored out of fold, censored runs in the clipped MAE\n")
        print("## Claims, all runs (Holm over the table's judged rows)\n")
        print(claims_markdown(report.claims))
        for scenario, table in report.by_scenario.items():
            print(f"\n## Claims, {scenario} only\n")
            print(claims_markdown(table))
        print("\n## Predictors (out of fold)\n")
        print(predictors_markdown(report.predictors))
        if not report.head_options.empty:
            print("\n## Head options and the censoring-aware head, minus the default EGTP head\n")
            print(head_options_markdown(report.head_options))
        for name, why in report.config["skipped"].items():
            print(f"\nnot cross-validated: {name}: {why}")
    table = pd.concat([t.assign(scope=scope) for scope, t in [("all", report.claims), *report.by_scenario.items()]],
                      ignore_index=True)
    table = table[["scope", *[c for c in table.columns if c != "scope"]]]
    document = {"dataset": dataset, "counts": asdict(counts), "folds": args.folds, "seeds": args.seeds,
                "layer": layer, "probe_layer": probe_layer, "claims": report.claims,
                "by_scenario": report.by_scenario, "predictors": report.predictors,
                "head_options": report.head_options, "skipped": report.config["skipped"]}
    write_data(args, table, document, what="claims table")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from lenscope.jobs.study.report import study_report
    from lenscope.jobs.study.results import StoreResults

    store, dataset, layer, probe_layer = _resolve(args)
    out = args.out or Path(f"lenscope-report-{dataset}.html")
    write_text(out, study_report(StoreResults(store, dataset, layer, probe_layer)))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): dataset {dataset!r}, heads at layer {layer}")
    return 0
