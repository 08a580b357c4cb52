"""``lenscope claims`` and ``lenscope report``: a study's claims judged with paired CIs, and the whole study as
one offline HTML file."""

from __future__ import annotations

import argparse
from pathlib import Path

from lenscope.cli._common import add_dataset_arg, output_file


def _dataset_args(p: argparse.ArgumentParser) -> None:
    add_dataset_arg(p)
    p.add_argument("--layer", type=int, default=None,
                   help="layer of the EGTP heads and PLP (default: the dataset's last recorded layer)")
    p.add_argument("--probe-layer", type=int, default=None, help="default: half the head layer")


def register(subparsers) -> None:
    p = subparsers.add_parser("claims", help="judge the papers' claims on a dataset's trained predictors "
                                             "(paired 95%% CIs; markdown table)")
    _dataset_args(p)
    p.set_defaults(func=run_claims)
    p = subparsers.add_parser("report", help="write a study's tables and figures as one HTML file that opens "
                                             "offline")
    _dataset_args(p)
    p.add_argument("--out", type=output_file, default=None, help="default: lenscope-report-<dataset>.html")
    p.set_defaults(func=run_report)


def _resolve(args: argparse.Namespace):
    from cache.store import Store
    from lenscope.jobs.study import study_layers

    store = Store()
    layer = study_layers(store, args.dataset)[0] if args.layer is None else args.layer
    return store, args.dataset, layer, layer // 2 if args.probe_layer is None else args.probe_layer


def run_claims(args: argparse.Namespace) -> int:
    from lenscope.jobs.claims import claims_markdown, claims_table
    from lenscope.jobs.datasets import dataset_counts

    store, dataset, layer, probe_layer = _resolve(args)
    print(f"dataset {dataset!r}: {dataset_counts(store, dataset).caption()}\n")
    print(claims_markdown(claims_table(store, dataset, layer, probe_layer)))
    return 0


def run_report(args: argparse.Namespace) -> int:
    from lenscope.jobs.report import study_report

    store, dataset, layer, probe_layer = _resolve(args)
    out = args.out or Path(f"lenscope-report-{dataset}.html")
    out.write_text(study_report(store, dataset, layer, probe_layer), encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): dataset {dataset!r}, heads at layer {layer}")
    return 0
