"""The results leaderboard: every stored prediction on a dataset's runs, scored by predictor and scenario."""

from __future__ import annotations

import pandas as pd

from analysis.results.leaderboard import (
    ALL,
    FRAME_COLUMNS,
    attach_runs,
    cell_rows,
    constant_mean_predictions,
    length_cdfs,
    paired_vs_reference,
    pred_true_histogram,
    run_rows,
    score_matrix,
    score_table,
    select,
)
from cache.store import Store
from lenscope.jobs.datasets import dataset_runs

__all__ = ["ALL", "benchmark_frame", "cell_rows", "length_cdfs", "paired_vs_reference", "pred_true_histogram",
           "run_rows", "score_matrix", "score_table", "select"]


def benchmark_frame(store: Store, dataset: str, include_censored: bool = False) -> pd.DataFrame:
    """Every stored prediction of the predictors trained on ``dataset`` (any kind), with scenario and prompt,
    plus the constant train-mean reference; columns :data:`analysis.results.leaderboard.FRAME_COLUMNS`."""
    runs = dataset_runs(store, dataset, include_censored)
    parts = []
    predictors = store.predictors_frame()
    dataset_id = store.dataset_id(dataset)
    for p in predictors[predictors["dataset_id"] == dataset_id].itertuples():
        rows = store.predictions_frame(int(p.predictor_id))
        rows = attach_runs(rows[rows["run_id"].isin(runs["run_id"])], runs)
        parts.append(rows.assign(predictor_id=int(p.predictor_id), predictor=p.name, family=p.kind, dataset=dataset))
    steps = {0}.union(*(set(p["step"].astype(int)) for p in parts))
    parts.insert(0, constant_mean_predictions(runs.assign(dataset=dataset), sorted(steps)))
    parts = [p[FRAME_COLUMNS] for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FRAME_COLUMNS)
