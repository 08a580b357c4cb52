"""``lenscope train-drafter`` (OUTLETS drafter variants) and ``lenscope train-probe`` (TRAIL-style
MLP probe on one target layer), both trained on a collected dataset and registered in the store."""

from __future__ import annotations

import argparse

from analysis.outlets.training import VARIANTS
from lenscope.cli import _common
from models.drafter import LENGTH_MODES


def register(subparsers) -> None:
    p = subparsers.add_parser("train-drafter", help="train an EAGLE-3-style drafter with a length head (OUTLETS)")
    _common.add_model_args(p)
    _common.add_dataset_arg(p, "collected dataset to train on")
    p.add_argument("--variant", default="outlets", choices=list(VARIANTS),
                   help="outlets (joint), lp-only, sd-only, no-decoder, classification, no-gate")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (the length head uses 3x)")
    p.add_argument("--max-step", type=int, default=128, help="store predictions for steps 0..max-step")
    p.add_argument("--seed", type=int, default=0)
    _common.add_censoring_arg(p)
    p.set_defaults(func=run_drafter)

    q = subparsers.add_parser("train-probe", help="train an MLP probe on one target layer (TRAIL-style baseline)")
    _common.add_dataset_arg(q)
    q.add_argument("--layer", type=int, default=15, help="stored hidden layer to probe")
    q.add_argument("--mode", default="regression", choices=LENGTH_MODES,
                   help="regression of log1p(length), or binned expected-value classification")
    q.add_argument("--epochs", type=int, default=30)
    q.add_argument("--max-step", type=int, default=128)
    q.add_argument("--seed", type=int, default=0)
    _common.add_censoring_arg(q)
    q.set_defaults(func=run_probe)


def _positive(value: int, name: str) -> None:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def _report(result) -> None:
    print(f"registered {result.name} (predictor {result.predictor_id}): {_common.metrics_line(result.metrics)}")


def _bar_callback(bar):
    state = {"label": None}

    def update(done: int, total: int, label: str) -> None:
        phase = label.split(" (")[0]
        if phase != state["label"]:
            state["label"] = phase
            bar.reset(total=total)
            bar.set_description(phase)
        bar.n = done
        bar.set_postfix_str(label[len(phase):].strip(" ()"))
        bar.refresh()
    return update


def run_drafter(args: argparse.Namespace) -> int:
    from cache.store import Store
    from lenscope.jobs.datasets import dataset_runs
    from lenscope.jobs.outlets import train_drafter_job

    _positive(args.epochs, "--epochs")
    store = Store()
    dataset_runs(store, args.dataset)
    target = _common.load_target(args)
    with _common.progress_bar(1, f"train-drafter {args.variant}") as bar:
        result = train_drafter_job(store, target, args.dataset, args.variant, args.epochs, args.lr,
                                   args.max_step, args.seed, include_censored=args.include_censored,
                                   on_progress=_bar_callback(bar))
    _report(result)
    return 0


def run_probe(args: argparse.Namespace) -> int:
    from cache.store import Store
    from lenscope.jobs.outlets import train_probe_job

    _positive(args.epochs, "--epochs")
    with _common.progress_bar(1, f"train-probe L{args.layer}") as bar:
        result = train_probe_job(Store(), args.dataset, args.layer, args.mode, args.epochs, args.max_step,
                                 args.seed, include_censored=args.include_censored, on_progress=_bar_callback(bar))
    _report(result)
    return 0
