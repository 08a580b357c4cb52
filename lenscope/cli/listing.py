"""``lenscope datasets`` and ``lenscope predictors``: what the store holds, as a table or data (``--format``)."""

from __future__ import annotations

import argparse

from lenscope.cli._common import NOTHING_WRITTEN, add_output_args, dataset_arg, shows_text, write_data


def register(subparsers) -> None:
    d = subparsers.add_parser("datasets", help="list the store's datasets: runs, finished and censored runs, model, "
                                               "runs per scenario")
    add_output_args(d, "one row per dataset (scenarios as JSON text)")
    d.set_defaults(func=run_datasets, interrupt_note=NOTHING_WRITTEN)

    p = subparsers.add_parser("predictors", help="list the store's trained predictors: id, name, kind, dataset, "
                                                 "model and headline metrics (static MAE with its 95%% CI, dynamic "
                                                 "MAE, Kendall tau)")
    p.add_argument("--dataset", type=dataset_arg, default=None,
                   help="only the predictors trained on this dataset (default: all)")
    p.add_argument("--kind", default=None, help="only predictors of this kind, e.g. static, plp, probe, drafter, "
                                                "baseline (default: all)")
    add_output_args(p, "one row per predictor")
    p.set_defaults(func=run_predictors, interrupt_note=NOTHING_WRITTEN)


def _store():
    from lenscope.store.store import Store

    return Store()


def run_datasets(args: argparse.Namespace) -> int:
    from lenscope.jobs.runs.datasets import datasets_overview
    from lenscope.store.errors import store_location

    store = _store()
    table = datasets_overview(store)
    if shows_text(args):
        if table.empty:
            print(f"the store at {store_location(store.url)} has no dataset yet; run `python -m lenscope study` "
                  "(or `collect --dataset NAME`)")
        else:
            shown = table.assign(scenarios=[", ".join(f"{s} {n}" for s, n in d.items()) for d in table["scenarios"]],
                                 created=table["created"].map(lambda t: str(t)[:16]))
            print(shown.to_string(index=False))
    write_data(args, table, what="datasets")
    return 0


def run_predictors(args: argparse.Namespace) -> int:
    from lenscope.jobs.runs.datasets import predictors_overview

    store = _store()
    table = predictors_overview(store)
    if args.dataset is not None:
        table = table[table["dataset"] == args.dataset]
    if args.kind is not None:
        table = table[table["kind"] == args.kind]
    table = table.reset_index(drop=True)
    if shows_text(args):
        if table.empty:
            which = "".join(f" {w} {v!r}" for w, v in (("on dataset", args.dataset), ("of kind", args.kind)) if v)
            print(f"no trained predictor{which} in the store; train some with `python -m lenscope study` (or "
                  "train-egtp, train-probe, train-drafter, train-baselines)")
        else:
            print(_predictors_text(table))
    write_data(args, table, what="predictors")
    return 0


def _predictors_text(table) -> str:
    """The predictors as text: MAE as ``value [lo, hi]``, tau to 3 digits."""
    def number(value, digits: int = 1) -> str:
        return "" if value is None or value != value else f"{value:.{digits}f}"

    shown = table[["predictor_id", "name", "kind", "dataset", "model"]].rename(columns={"predictor_id": "id"})
    shown["MAE [95% CI]"] = [f"{number(v)} [{number(lo)}, {number(hi)}]" if number(v) else ""
                             for v, lo, hi in table[["static_mae", "static_mae_lo", "static_mae_hi"]].to_numpy()]
    shown["dynamic MAE"] = [number(v) for v in table["dynamic_mae"]]
    shown["Kendall tau"] = [number(v, 3) for v in table["kendall_tau"]]
    shown["on"] = [f"{s} ({int(n)} runs)" if s and n is not None and n == n else (s or "")
                   for s, n in table[["eval_split", "n_runs"]].to_numpy()]
    return shown.to_string(index=False)
