"""Benchmark aggregation over stored predictions (pure pandas): MAE / Kendall tau per predictor and
scenario, the cells' underlying rows, predicted-vs-true histograms and length CDFs.

The benchmark frame has one row per prediction with columns :data:`FRAME_COLUMNS`. Static predictors only
have step 0 (the whole output length, predicted before decoding); dynamic ones (PLP, probes, drafters) also
have later steps (remaining length). On RL data every sample is a run, so a static predictor is judged
against each sample's length and a dynamic one per sample.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.scenarios import SCENARIOS

FRAME_COLUMNS = ["predictor_id", "predictor", "family", "dataset", "run_id", "prompt_id", "scenario", "step",
                 "predicted", "true", "split"]
REFERENCE = "constant (train mean)"
ALL = "all"
UNLABELLED = "unlabelled"


def kendall_tau(predicted, true) -> float:
    """Kendall's tau-b between predicted and true lengths (NaN with fewer than 2 rows or no variation)."""
    from scipy.stats import kendalltau

    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    if p.size < 2 or np.ptp(p) == 0 or np.ptp(t) == 0:
        return float("nan")
    return float(kendalltau(p, t).statistic)


def attach_runs(predictions: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Predictions with the prompt_id and scenario of their run (``unlabelled`` for runs outside ``runs``)."""
    out = predictions.drop(columns=[c for c in ("prompt_id", "scenario") if c in predictions]).merge(
        runs[["run_id", "prompt_id", "scenario"]], on="run_id", how="left")
    out["scenario"] = out["scenario"].fillna(UNLABELLED)
    return out


def constant_mean_predictions(runs: pd.DataFrame) -> pd.DataFrame:
    """The reference predictor: every run predicted as the mean output length of the training runs.

    ``runs`` has columns run_id, prompt_id, scenario, output_tokens, split (and optionally dataset)."""
    train = runs.loc[runs["split"] == "train", "output_tokens"]
    if train.empty:
        return pd.DataFrame(columns=FRAME_COLUMNS)
    return pd.DataFrame({
        "predictor_id": -1, "predictor": REFERENCE, "family": "reference",
        "dataset": runs.get("dataset", ""), "run_id": runs["run_id"],
        "prompt_id": runs["prompt_id"], "scenario": runs["scenario"], "step": 0,
        "predicted": float(train.mean()), "true": runs["output_tokens"].astype(float), "split": runs["split"],
    })[FRAME_COLUMNS]


def select(frame: pd.DataFrame, split: str | None = "test", step: int = 0) -> pd.DataFrame:
    """Rows of one split (None: all splits) at one decoding step."""
    rows = frame[frame["step"] == step]
    return rows if split is None else rows[rows["split"] == split]


def _scores(group: pd.DataFrame) -> pd.Series:
    err = (group["predicted"] - group["true"]).abs()
    return pd.Series({"mae": float(err.mean()), "kendall_tau": kendall_tau(group["predicted"], group["true"]),
                      "n": len(group)})


def score_table(frame: pd.DataFrame) -> pd.DataFrame:
    """MAE, Kendall tau and row count per (predictor, family, scenario), plus scenario ``all``."""
    cols = ["predictor", "family", "scenario", "mae", "kendall_tau", "n"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    keys = ["predictor", "family"]
    per = frame.groupby([*keys, "scenario"]).apply(_scores, include_groups=False).reset_index()
    overall = frame.groupby(keys).apply(_scores, include_groups=False).reset_index().assign(scenario=ALL)
    out = pd.concat([per, overall], ignore_index=True)[cols]
    out["n"] = out["n"].astype(int)
    return out


def scenario_order(scenarios) -> list[str]:
    """Known scenarios in ForeLen order, then any others alphabetically, then ``all``."""
    present = set(scenarios) - {ALL}
    return [s for s in SCENARIOS if s in present] + sorted(present - set(SCENARIOS)) + [ALL]


def score_matrix(scores: pd.DataFrame, value: str = "mae") -> pd.DataFrame:
    """Predictors as rows (best overall first), scenarios as columns, ``value`` in the cells."""
    if scores.empty:
        return pd.DataFrame()
    wide = scores.pivot(index="predictor", columns="scenario", values=value)
    wide = wide[scenario_order(wide.columns)].rename_axis(columns=None)
    ascending = value != "kendall_tau"
    return wide.sort_values(ALL, ascending=ascending, na_position="last")


def cell_rows(frame: pd.DataFrame, predictor: str, scenario: str = ALL) -> pd.DataFrame:
    """The predictions behind one table cell, largest absolute error first (with ``abs_error``)."""
    rows = frame[frame["predictor"] == predictor]
    if scenario != ALL:
        rows = rows[rows["scenario"] == scenario]
    rows = rows.assign(abs_error=(rows["predicted"] - rows["true"]).abs())
    return rows.sort_values("abs_error", ascending=False).reset_index(drop=True)


def run_rows(frame: pd.DataFrame, run_id: int) -> pd.DataFrame:
    """Every predictor's predictions for one run (all steps), by predictor then step."""
    return frame[frame["run_id"] == run_id].sort_values(["predictor", "step"]).reset_index(drop=True)


def pred_true_histogram(predicted, true, bins: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """2-D histogram counts [true bin, predicted bin] on shared edges spanning both axes, and the edges."""
    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    if p.size == 0:
        raise ValueError("no predictions to histogram")
    hi = max(p.max(), t.max(), 1.0)
    edges = np.linspace(min(p.min(), t.min(), 0.0), hi, bins + 1)
    counts, _, _ = np.histogram2d(t, p, bins=[edges, edges])
    return counts, edges


def length_cdfs(frame: pd.DataFrame) -> pd.DataFrame:
    """Empirical CDFs (columns series, length, cdf) of the true lengths (one per run) and of each
    predictor's predictions."""
    parts = []
    truth = frame.drop_duplicates("run_id")["true"]
    for name, values in [("true length", truth), *((p, g["predicted"]) for p, g in frame.groupby("predictor"))]:
        x = np.sort(np.asarray(values, dtype=float))
        parts.append(pd.DataFrame({"series": name, "length": x, "cdf": np.arange(1, len(x) + 1) / len(x)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["series", "length", "cdf"])
