"""``lenscope publish-results`` and ``lenscope ship-predictors``: write a study's results (``data/results``) and
trained predictors (``data/predictors``) as the small files a fresh clone shows and predicts with."""

from __future__ import annotations

import argparse
from pathlib import Path

from lenscope.cli._common import PARTLY_WRITTEN, add_model_args, dataset_arg, load_target


def register(subparsers: argparse._SubParsersAction) -> None:
    r = subparsers.add_parser("publish-results", help="write a study's results as the small files under "
                                                      "data/results every page shows on a fresh clone")
    r.add_argument("--dataset", type=dataset_arg, default="study", help="store dataset whose results to publish")
    r.add_argument("--out", type=Path, default=None, help="folder (default: data/results of the repository)")
    add_model_args(r)  # the claims are read back with the model PiA asked
    r.set_defaults(func=run_publish, interrupt_note=PARTLY_WRITTEN)
    s = subparsers.add_parser("ship-predictors", help="write a dataset's trained predictors, with manifests, under "
                                                       "data/predictors (what a fresh clone predicts with)")
    s.add_argument("--dataset", type=dataset_arg, default="study",
                   help="store dataset whose trained predictors to ship")
    s.add_argument("--out", type=Path, default=None, help="folder (default: data/predictors of the repository)")
    s.set_defaults(func=run_ship, interrupt_note=PARTLY_WRITTEN)


def run_publish(args: argparse.Namespace) -> int:
    from lenscope.jobs.study.results import StoreResults
    from lenscope.jobs.study.shipped import RESULTS_DIR, publish_results
    from lenscope.store.store import Store

    root = _folder(args.out, RESULTS_DIR)
    manifest = publish_results(StoreResults(Store(), args.dataset), load_target(args), root)
    print(f"published {len(manifest['files'])} files of dataset {args.dataset!r} ({manifest['runs']} runs) to {root}")
    return 0


def run_ship(args: argparse.Namespace) -> int:
    from lenscope.jobs.predictors.catalog import SHIPPED_DIR, ship_predictors
    from lenscope.jobs.predictors.predict import interval_metrics
    from lenscope.store.store import Store

    root, store = _folder(args.out, SHIPPED_DIR), Store()
    names = ship_predictors(store, args.dataset, root, interval_metrics(store, args.dataset))
    if not names:
        raise ValueError(f"no catalog predictor is trained on dataset {args.dataset!r}; run "
                         "`python -m lenscope study --size full` first")
    print(f"shipped {', '.join(names)} from dataset {args.dataset!r} to {root}")
    return 0


def _folder(out: Path | None, repository_folder: Path) -> Path:
    """``--out``, else the repository's folder: an installed copy has none (its bundled data is read-only)."""
    from lenscope.store.settings import CHECKOUT

    if out is None and not CHECKOUT:
        raise ValueError("this lenscope is installed, not a repository checkout: its shipped data is not written; "
                         "pass --out FOLDER")
    return out or repository_folder
