"""The results leaderboard: every stored prediction on a dataset's runs, scored by predictor and scenario."""

from __future__ import annotations

import pandas as pd

from lenscope.analysis.core.metrics import paired_mae_difference
from lenscope.analysis.results.leaderboard import (
    ALL,
    FRAME_COLUMNS,
    attach_runs,
    cell_rows,
    constant_predictions,
    length_cdfs,
    paired_vs_reference,
    pred_true_histogram,
    run_rows,
    score_matrix,
    score_table,
    select,
)
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.store.store import Store

__all__ = ["ALL", "benchmark_frame", "cell_rows", "compare_predictors", "length_cdfs", "paired_vs_reference",
           "pred_true_histogram", "run_rows", "score_matrix", "score_table", "select"]


def benchmark_frame(store: Store, dataset: str, include_censored: bool = False) -> pd.DataFrame:
    """Every stored prediction of the predictors trained on ``dataset`` (any kind), with scenario and prompt,
    plus the constant train-median reference; columns :data:`lenscope.analysis.results.leaderboard.FRAME_COLUMNS`."""
    runs = dataset_runs(store, dataset, include_censored)
    parts = []
    predictors = store.predictors_frame()
    dataset_id = store.dataset_id(dataset)
    for p in predictors[predictors["dataset_id"] == dataset_id].itertuples():
        rows = store.predictions_frame(int(p.predictor_id))
        rows = attach_runs(rows[rows["run_id"].isin(runs["run_id"])], runs)
        parts.append(rows.assign(predictor_id=int(p.predictor_id), predictor=p.name, family=p.kind, dataset=dataset))
    steps = {0}.union(*(set(p["step"].astype(int)) for p in parts))
    parts.insert(0, constant_predictions(runs.assign(dataset=dataset), sorted(steps)))
    parts = [p[FRAME_COLUMNS] for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FRAME_COLUMNS)


def compare_predictors(store: Store, first: int, second: int, max_step: int = 32) -> list[dict]:
    """Paired MAE difference (first minus second) on the runs and steps both predicted, on the test split,
    at step 0 (static) and over steps 0..``max_step`` (dynamic), with bootstrap CIs over prompts."""
    names = store.predictors_frame().set_index("predictor_id")["name"]
    a, b = store.predictions_frame(first), store.predictions_frame(second)
    both = a.merge(b, on=["run_id", "step"], suffixes=("_a", "_b"))
    both = both[(both["split_a"] == "test") & (both["step"] <= max_step)]
    prompts = store.runs_frame().set_index("run_id")["prompt_id"]
    out = []
    for label, rows in (("0", both[both["step"] == 0]), (f"0-{max_step}", both)):
        if rows.empty:
            continue
        groups = rows["run_id"].map(prompts)
        diff = paired_mae_difference(rows["predicted_a"], rows["predicted_b"], rows["true_a"], groups)
        out.append({"first": names[first], "second": names[second], "steps": label, "difference": diff.value,
                    "lo": diff.lo, "hi": diff.hi, "prompts": diff.n, "runs": int(rows["run_id"].nunique())})
    return out
