"""``lenscope study``: the whole study as one resumable pipeline (import, collect, train, attribute, claims)."""

from __future__ import annotations

import argparse
import signal

from lenscope.cli._common import PhaseBars, add_model_args, add_ray_args, dataset_arg, load_target, ray_options


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def register(subparsers) -> None:
    from lenscope.jobs.study.pipeline import SIZES

    p = subparsers.add_parser("study", help="run the study end to end, skipping every step already stored")
    add_model_args(p)
    p.add_argument("--size", choices=list(SIZES), default="starter",
                   help="starter: a first look (minutes on 2 CPU cores); full: the >= 2,000-run study whose "
                        "generations ship in data/generations/ (imported first); tiny: for tests")
    p.add_argument("--dataset", type=dataset_arg, default=None,
                   help="dataset name (default: study for full, else the size's name)")
    p.add_argument("--train-only", action="store_true",
                   help="skip importing and collecting: train, attribute and judge on the runs stored now")
    add_ray_args(p, "collect")
    p.set_defaults(func=run, writes_store=True)


def run(args: argparse.Namespace) -> int:
    from lenscope.jobs.results.claims import claims_markdown, stored_claims_table
    from lenscope.jobs.runs.datasets import dataset_counts
    from lenscope.jobs.study.pipeline import TRAINS_ON_CENSORED, run_study, study_dataset
    from lenscope.store.store import Store

    dataset = args.dataset or study_dataset(args.size)
    target = load_target(args)
    store = Store()
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops between stored results, like Ctrl-C
    with PhaseBars() as bars:
        report = run_study(store, target, dataset, args.size, on_progress=bars, collect=not args.train_only,
                           ray=ray_options(args))
    for step, status in report:
        print(f"  {step}: {status}")
    print(f"\ndataset {dataset!r}: {dataset_counts(store, dataset).caption()}")
    if args.size in TRAINS_ON_CENSORED:
        print(f"(the {args.size} study trains and scores on censored runs too: it proves the pipeline, its numbers "
              "mean nothing)")
    print()
    table = stored_claims_table(store, dataset)
    print("claims not judged (see the claims step above)" if table is None else claims_markdown(table))
    return 0
