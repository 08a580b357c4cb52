"""``lenscope train-egtp | train-plp | attribution``: the EGTP paper's experiments on a stored dataset."""

from __future__ import annotations

import argparse

from lenscope.cli._common import (
    PhaseBars,
    add_censoring_arg,
    add_dataset_arg,
    add_model_args,
    load_target,
    non_negative_int,
    number,
    positive,
    positive_int,
    seed,
)
from lenscope.models.numbers import UNIT_INTERVAL, Range


def _add_common(p: argparse.ArgumentParser) -> None:
    add_dataset_arg(p)
    p.add_argument("--layer", type=non_negative_int, default=30, help="hidden layer the head reads (must be stored)")
    p.add_argument("--alpha", type=positive, default=1.0, help="EGTP temperature: weights softmax(H / alpha)")


def _add_training(p: argparse.ArgumentParser, epochs: int, batch: int) -> None:
    p.add_argument("--epochs", type=positive_int, default=epochs, help="training epochs over the train split")
    p.add_argument("--batch-size", type=positive_int, default=batch, help="runs per training batch")
    p.add_argument("--lr", type=positive, default=1e-3, help="AdamW learning rate")
    p.add_argument("--bins", type=number(Range(2, integral=True)), default=20, help="number of length bins K")
    p.add_argument("--lam", type=number(UNIT_INTERVAL), default=0.95,
                   help="weight of CE in lambda*CE + (1-lambda)*MSE")
    p.add_argument("--seed", type=seed, default=42, help="seed of initialisation and batch order")
    add_censoring_arg(p)


def register(subparsers) -> None:
    p = subparsers.add_parser("train-egtp", help="train static soft-label heads per pooling (EGTP ablation)")
    _add_common(p)
    _add_training(p, epochs=60, batch=16)
    p.add_argument("--pooling", default="all", choices=["egtp", "mean", "max", "last", "all"],
                   help="pooling of the prompt's states: egtp (entropy-weighted mean, the EGTP paper's), mean, max, "
                        "last token, or all four (the paper's pooling ablation)")
    p.set_defaults(func=run_train_egtp, writes_store=True)

    p = subparsers.add_parser("train-plp", help="train the progressive remaining-length head (PLP)")
    _add_common(p)
    _add_training(p, epochs=15, batch=64)
    p.set_defaults(func=run_train_plp, writes_store=True)

    p = subparsers.add_parser("attribution", help="entropy vs gradient importance of prompt tokens")
    _add_common(p)
    add_model_args(p)
    p.add_argument("--attr-layer", type=non_negative_int, default=None,
                   help="layer of the attributed states; below --layer the gradient runs through the "
                        "target's layers (needs the model), equal to --layer only through the pooling")
    p.add_argument("--heads", default="egtp,mean", help="static heads to attribute (trained by train-egtp)")
    p.add_argument("--bootstrap", type=positive_int, default=1000, help="bootstrap resamples of the CIs")
    p.add_argument("--evidence", action="store_true",
                   help="the reviewer's test instead: a learned attention-pooling head (no entropy in its path) "
                        "beside the mean and EGTP heads, every importance measure x control with CIs, the "
                        "permutation null and a verdict (stored)")
    p.add_argument("--epochs", type=positive_int, default=60, help="attention-head training epochs (with --evidence)")
    p.add_argument("--permutations", type=positive_int, default=200,
                   help="within-run entropy shuffles (with --evidence)")
    add_censoring_arg(p)
    p.set_defaults(func=run_attribution)


def _config(args: argparse.Namespace):
    from lenscope.analysis.egtp.training import HeadConfig

    return HeadConfig(bins=args.bins, lam=args.lam, lr=args.lr, batch_size=args.batch_size,
                      epochs=args.epochs, seed=args.seed)


def run_train_egtp(args: argparse.Namespace) -> int:
    import torch

    from lenscope.analysis.egtp.pooling import POOLINGS
    from lenscope.jobs.egtp.heads import train_static
    from lenscope.store.store import Store

    torch.set_num_threads(1)
    poolings = POOLINGS if args.pooling == "all" else (args.pooling,)
    with PhaseBars() as bars:
        table = train_static(Store(), args.dataset, poolings, args.layer, args.alpha, _config(args),
                             include_censored=args.include_censored, on_progress=bars)
    print(f"test MAE (tokens) by pooling and scenario, dataset {args.dataset!r}, layer {args.layer}:")
    print(table.pivot(index="pooling", columns="scenario", values="mae").round(2).to_string())
    return 0


def run_train_plp(args: argparse.Namespace) -> int:
    import torch

    from lenscope.jobs.egtp.heads import train_plp
    from lenscope.store.store import Store

    torch.set_num_threads(1)
    with PhaseBars() as bars:
        curve = train_plp(Store(), args.dataset, args.layer, args.alpha, _config(args),
                          include_censored=args.include_censored, on_progress=bars)
    print(f"PLP test MAE of the remaining length by observed steps, dataset {args.dataset!r}:")
    print(curve[curve["step"].isin([0, 1, 2, 4, 8, 16, 32])].round(2).to_string(index=False))
    return 0


def run_attribution(args: argparse.Namespace) -> int:
    import torch

    from lenscope.jobs.egtp.heads import EGTP_ATTRIBUTION_R
    from lenscope.jobs.egtp.heads import run_attribution as job
    from lenscope.store.store import Store

    torch.set_num_threads(1)
    if args.evidence:
        return _run_evidence(args)
    attr_layer = args.layer if args.attr_layer is None else args.attr_layer
    model = load_target(args).model if attr_layer < args.layer else None
    with PhaseBars() as bars:
        payload = job(Store(), args.dataset, args.layer, attr_layer, args.alpha, model,
                      [h for h in args.heads.split(",") if h], args.bootstrap,
                      include_censored=args.include_censored, on_progress=bars)
    print(f"entropy vs importance over test prompt tokens (paper: Pearson r = {EGTP_ATTRIBUTION_R}):")
    for s in payload["summaries"]:
        print(f"  {s['head']:>5} head, {s['path']} path L{args.layer}<-L{attr_layer}: "
              f"Pearson {s['pearson']:.3f} [{s['pearson_ci'][0]:.3f}, {s['pearson_ci'][1]:.3f}], "
              f"Spearman {s['spearman']:.3f} [{s['spearman_ci'][0]:.3f}, {s['spearman_ci'][1]:.3f}], "
              f"{s['n_tokens']} tokens / {s['n_runs']} runs")
    return 0


def _run_evidence(args: argparse.Namespace) -> int:
    from lenscope.figures.attribution import evidence_display, head_summary_display
    from lenscope.jobs.egtp.attribution import attribution_evidence
    from lenscope.store.store import Store

    with PhaseBars() as bars:
        payload = attribution_evidence(Store(), args.dataset, args.layer, args.epochs, args.include_censored,
                                       args.bootstrap, args.permutations, on_progress=bars)
    runs = payload["runs"]
    print(f"attribution evidence, dataset {args.dataset!r}, layer {payload['layer']}, importances at each head's "
          f"input (test split: {runs['test']} runs; attention heads trained on {runs['train']}, epochs chosen on "
          f"{runs['val']}):")
    table = evidence_display(payload["table"], payload["paper_pearson"])
    print(table.drop(columns=["layer", "path"]).to_string(index=False))
    print("the heads on the test runs:")
    print(head_summary_display(payload["heads"]).to_string(index=False))
    print(f"paper: Pearson r = {payload['paper_pearson']}")
    for text in payload["verdicts"].values():
        print(f"verdict: {text}")
    print(payload["positive_control"])
    return 0
