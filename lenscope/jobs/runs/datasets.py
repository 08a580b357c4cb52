"""The evaluation kernel's reading side: a dataset's runs with their task, split and censoring, the split metrics
are reported on, and what a training job returns. Every predictor, attribution and replay reads runs here.

Runs whose answer hit the token cap are *censored*: their true length is only known to exceed the cap, so by
default they are left out of training and scoring (as OUTLETS drops outputs over its limit); they are still
counted (:class:`DatasetCounts`), and ``include_censored=True`` brings them back.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from lenscope.analysis.core.splits import FOLDS, fold_of, leak_groups, split_of, task_key
from lenscope.store.store import Store

# The datasets pages open first: the full study, then the starter study.
PREFERRED_DATASETS = ("study", "starter")


@dataclass(frozen=True)
class DatasetCounts:
    """How many runs a dataset has, how many are censored (hit the cap), how many runs are used, and how many
    censored answers of its prompts were never imported (a sample of a shipped study keeps finished ones only)."""

    runs: int
    censored: int
    used: int
    by_split: dict
    not_imported: int = 0

    def caption(self) -> str:
        kept = "included" if self.used == self.runs else "left out"
        splits = ", ".join(f"{s} {n}" for s, n in self.by_split.items())
        missing = f", {self.not_imported} more that hit it not imported" if self.not_imported else ""
        return (f"{self.runs} runs, {self.censored} censored at the token cap ({kept}){missing}; {self.used} used: "
                f"{splits}")


def preferred_dataset(names: list[str]) -> str | None:
    """The dataset every page opens on: the full study, else the starter study, else the first one."""
    return next((n for n in PREFERRED_DATASETS if n in names), names[0] if names else None)


def all_runs(store: Store, dataset: str) -> pd.DataFrame:
    """Every run of ``dataset`` with its conversation ``task``, leak ``group``, cross-validation ``fold`` (of
    :data:`~lenscope.analysis.core.splits.FOLDS`), ``split`` and ``censored`` columns (errors when it is empty)."""
    runs = store.runs_frame(dataset)
    if runs.empty:
        raise ValueError(f"dataset {dataset!r} has no runs; create it with "
                         f"`python -m lenscope collect --dataset {dataset}`")
    return with_splits(runs)


def with_splits(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (columns ``source``, ``source_ref``, ``prompt``, ``finished``) with the ``task``, ``group``,
    ``fold``, ``split`` and ``censored`` columns of :func:`all_runs`, leak groups linked among these runs: the one
    way a dataset's split is computed, for stored runs and for the records of a generations file alike."""
    tasks = [task_key(s, r, t) for s, r, t in zip(runs["source"], runs["source_ref"], runs["prompt"])]
    groups = leak_groups(tasks, runs["prompt"])
    return runs.assign(task=tasks, group=groups, fold=[fold_of(g, FOLDS) for g in groups],
                       split=[split_of(g) for g in groups], censored=~runs["finished"].astype(bool))


def dataset_runs(store: Store, dataset: str, include_censored: bool = False) -> pd.DataFrame:
    """Runs of ``dataset`` with their task, split and censoring; censored runs only with ``include_censored``."""
    runs = all_runs(store, dataset)
    if not include_censored:
        runs = runs[~runs["censored"]]
    return runs.reset_index(drop=True)


def require_every_step(runs: pd.DataFrame, what: str) -> None:
    """Raise ValueError before ``what`` reads every answer step of ``runs`` when some of them have features of their
    first answer tokens only (censored runs the full study imported so: it reads no later step of them)."""
    cut = runs["feature_positions"].notna()
    if cut.any():
        raise ValueError(f"{what} reads every answer step, but {int(cut.sum()):,} censored run(s) of this dataset have "
                         "features of their first answer tokens only (the study imports them so): leave censored runs "
                         "out, or import their generations file again (`python -m lenscope import-generations FILE "
                         "--dataset NAME` computes every position and completes them in place)")


def dataset_counts(store: Store, dataset: str, include_censored: bool = False) -> DatasetCounts:
    """Runs, censored runs and the runs used per split, as every page and table reports them."""
    runs = all_runs(store, dataset)
    used = runs if include_censored else runs[~runs["censored"]]
    by_split = {s: int((used["split"] == s).sum()) for s in ("train", "val", "test")}
    config = store.dataset_config(dataset) or {}
    return DatasetCounts(len(runs), int(runs["censored"].sum()), len(used), by_split,
                         int(config.get("censored_not_imported", 0)))


@dataclass
class JobResult:
    """A registered predictor and its headline metrics."""

    predictor_id: int
    name: str
    metrics: dict


def predictor_fresh(store: Store, name: str, dataset: str, include_censored: bool = False,
           settings: dict | None = None) -> bool:
    """A predictor of this name is stored, was trained on every (uncensored) run the dataset has now and, with
    ``settings``, has them in its config (e.g. a drafter trained before the training-time test is stale)."""
    predictors = store.predictors_frame().set_index("name")
    if name not in predictors.index:
        return False
    config = predictors.loc[name, "config"] or {}
    if any(config.get(key) != value for key, value in (settings or {}).items()):
        return False
    counts = (predictors.loc[name, "metrics"] or {}).get("n") or {}
    return sum(counts.values()) == len(dataset_runs(store, dataset, include_censored))


# --- listings (``lenscope datasets``, ``lenscope predictors``): read only ---------------------------------------------

HEADLINE_METRICS = ("static_mae", "static_mae_lo", "static_mae_hi", "dynamic_mae", "kendall_tau", "eval_split",
                    "n_runs")


def datasets_overview(store: Store) -> pd.DataFrame:
    """One row per dataset of the store, by name: ``dataset``, ``runs``, ``finished``, ``censored`` (hit the token
    cap), ``features_cut`` (censored runs with features of their first answer tokens only, as the study imports
    them), ``model`` (the spec its model was loaded from), ``scenarios`` ({scenario: runs}) and ``created``."""
    from sqlalchemy import func, select

    from lenscope.store.schema import Dataset, DatasetRun, ModelRecord, Run

    with store.session() as s:
        datasets = s.execute(select(Dataset.id, Dataset.name, ModelRecord.source, Dataset.created)
                             .join(ModelRecord, ModelRecord.id == Dataset.model_id, isouter=True)
                             .order_by(Dataset.name)).all()
        cut = Run.feature_positions.is_not(None)
        counts = s.execute(select(DatasetRun.dataset_id, DatasetRun.scenario, Run.finished, cut, func.count())
                           .join(Run, Run.id == DatasetRun.run_id)
                           .group_by(DatasetRun.dataset_id, DatasetRun.scenario, Run.finished, cut)).all()
    rows = []
    for dataset_id, name, model, created in datasets:
        mine = [(scenario, bool(finished), bool(short), int(n))
                for d, scenario, finished, short, n in counts if d == dataset_id]
        scenarios: dict[str, int] = {}
        for scenario, *_, n in sorted(mine):
            scenarios[scenario] = scenarios.get(scenario, 0) + n
        finished = sum(n for _, done, _, n in mine if done)
        runs = sum(n for *_, n in mine)
        rows.append({"dataset": name, "runs": runs, "finished": finished, "censored": runs - finished,
                     "features_cut": sum(n for *_, short, n in mine if short), "model": model,
                     "scenarios": scenarios, "created": created})
    return pd.DataFrame(rows, columns=["dataset", "runs", "finished", "censored", "features_cut", "model", "scenarios",
                                       "created"])


def predictors_overview(store: Store) -> pd.DataFrame:
    """One row per trained predictor of the store, by id: ``predictor_id``, ``name``, ``kind``, ``dataset``,
    ``model`` (the predictor's, else its dataset's), ``created`` and the headline metrics of its evaluation
    (:data:`HEADLINE_METRICS`; static MAE with its 95% CI, dynamic MAE, Kendall tau, on ``eval_split``; missing
    ones are None)."""
    from sqlalchemy import func, select

    from lenscope.store.schema import Dataset, ModelRecord, PredictorRecord

    with store.session() as s:
        rows = s.execute(select(PredictorRecord.id, PredictorRecord.name, PredictorRecord.kind, Dataset.name,
                                ModelRecord.source, PredictorRecord.created, PredictorRecord.metrics)
                         .join(Dataset, Dataset.id == PredictorRecord.dataset_id, isouter=True)
                         .join(ModelRecord, ModelRecord.id == func.coalesce(PredictorRecord.model_id,
                                                                             Dataset.model_id), isouter=True)
                         .order_by(PredictorRecord.id)).all()
    out = []
    for pid, name, kind, dataset, model, created, metrics in rows:
        metrics = metrics or {}
        out.append({"predictor_id": pid, "name": name, "kind": kind, "dataset": dataset, "model": model,
                    **{key: metrics.get(key) for key in HEADLINE_METRICS}, "created": created})
    return pd.DataFrame(out, columns=["predictor_id", "name", "kind", "dataset", "model", *HEADLINE_METRICS,
                                      "created"])
