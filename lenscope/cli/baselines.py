"""``lenscope train-baselines``: the predictors the papers compare against, on one stored dataset."""

from __future__ import annotations

import argparse

from lenscope.cli._common import (
    PhaseBars,
    add_censoring_arg,
    add_dataset_arg,
    add_model_args,
    load_target,
    metrics_line,
    non_negative_int,
    number,
    positive,
    positive_int,
    seed,
)
from lenscope.models.numbers import Range


def register(subparsers) -> None:
    from lenscope.analysis.baselines import PAPERS
    from lenscope.jobs.predictors.baselines import BASELINES, DESCRIPTIONS

    p = subparsers.add_parser("train-baselines", help="train SSJF-Reg/MC, S3, TRAIL, PiA and LTR baselines",
                              description="Train the baselines the papers compare against, on one stored dataset:\n"
                                          + "\n".join(f"  {b}: {DESCRIPTIONS[b]} [{PAPERS[b]}]" for b in BASELINES))
    add_dataset_arg(p)
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(BASELINES)} (default: all; "
                                              "each is described above)")
    p.add_argument("--epochs", type=positive_int, default=60, help="training epochs of each learned baseline")
    p.add_argument("--lr", type=positive, default=1e-3, help="AdamW learning rate")
    p.add_argument("--batch-size", type=positive_int, default=16, help="prompts per training batch")
    p.add_argument("--buckets", type=number(Range(2, integral=True)), default=10, help="length bins of SSJF-MC and S3")
    p.add_argument("--trail-layer", type=non_negative_int, default=15,
                   help="target layer of the TRAIL probe (must be stored)")
    p.add_argument("--ltr-loss", default="listmle", choices=["listmle", "pairwise"],
                   help="loss of the LTR scorer: listwise (ListMLE) or pairwise (RankNet)")
    p.add_argument("--seed", type=seed, default=42, help="seed of initialisation and batch order")
    add_censoring_arg(p)
    add_model_args(p)
    p.set_defaults(func=run, writes_store=True)


def run(args: argparse.Namespace) -> int:
    import torch

    from lenscope.jobs.predictors.baselines import BaselineConfig, parse_selection, train_baselines
    from lenscope.store.store import Store

    torch.set_num_threads(1)
    chosen = parse_selection(args.only)
    config = BaselineConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, buckets=args.buckets,
                            trail_layer=args.trail_layer, ltr_loss=args.ltr_loss, seed=args.seed)
    target = load_target(args) if "pia" in chosen else None
    with PhaseBars() as bars:
        results = train_baselines(Store(), args.dataset, chosen, target, config,
                                  include_censored=args.include_censored, on_progress=bars)
    for r in results:
        m = r.metrics
        print(f"{r.name}: {metrics_line(m)}, Kendall tau {m['kendall_tau']:.3f}")
    return 0
