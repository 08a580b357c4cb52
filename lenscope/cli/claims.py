"""``lenscope claims``: the papers' claims judged on a dataset's trained predictors, with paired CIs."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser("claims", help="judge the papers' claims on a dataset's trained predictors "
                                             "(paired 95%% CIs; markdown table)")
    p.add_argument("--dataset", default="dev")
    p.add_argument("--layer", type=int, default=30, help="layer of the EGTP heads and PLP")
    p.add_argument("--probe-layer", type=int, default=15)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cache.store import Store
    from lenscope.jobs.claims import claims_markdown, claims_table
    from lenscope.jobs.datasets import dataset_counts

    store = Store()
    counts = dataset_counts(store, args.dataset)
    print(f"dataset {args.dataset!r}: {counts.caption()}\n")
    print(claims_markdown(claims_table(store, args.dataset, args.layer, args.probe_layer)))
    return 0
