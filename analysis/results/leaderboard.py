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

from lenscope.analysis.core.metrics import bootstrap_mae, kendall_tau, mae, paired_mae_difference
from lenscope.analysis.data.scenarios import SCENARIOS

FRAME_COLUMNS = ["predictor_id", "predictor", "family", "dataset", "run_id", "prompt_id", "scenario", "step",
                 "predicted", "true", "split"]
REFERENCE = "constant (train median)"
ALL = "all"
UNLABELLED = "unlabelled"
N_BOOT = 1000


def attach_runs(predictions: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Predictions with the prompt_id and scenario of their run (``unlabelled`` for runs outside ``runs``)."""
    out = predictions.drop(columns=[c for c in ("prompt_id", "scenario") if c in predictions]).merge(
        runs[["run_id", "prompt_id", "scenario"]], on="run_id", how="left")
    out["scenario"] = out["scenario"].fillna(UNLABELLED)
    return out


def constant_predictions(runs: pd.DataFrame, steps=(0,)) -> pd.DataFrame:
    """The reference predictor, per decoding step ``t``: every run still generating after ``t`` tokens is
    predicted the median remaining length ``L - t`` of the training runs still generating (step 0: the median
    output length, the best constant for MAE). It sees the step count, as PLP, probes and drafters do.

    ``runs`` has columns run_id, prompt_id, scenario, output_tokens, split (and optionally dataset)."""
    parts = []
    lengths = runs["output_tokens"].astype(float)
    for step in sorted(set(int(s) for s in steps)):
        alive = runs[lengths > step] if step else runs
        train = alive.loc[alive["split"] == "train", "output_tokens"].astype(float) - step
        if train.empty:
            continue
        parts.append(pd.DataFrame({
            "predictor_id": -1, "predictor": REFERENCE, "family": "reference",
            "dataset": alive.get("dataset", ""), "run_id": alive["run_id"],
            "prompt_id": alive["prompt_id"], "scenario": alive["scenario"], "step": step,
            "predicted": float(train.median()), "true": alive["output_tokens"].astype(float) - step,
            "split": alive["split"],
        })[FRAME_COLUMNS])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=FRAME_COLUMNS)


def select(frame: pd.DataFrame, split: str | None = "test", step: int = 0) -> pd.DataFrame:
    """Rows of one split (None: all splits) at one decoding step."""
    rows = frame[frame["step"] == step]
    return rows if split is None else rows[rows["split"] == split]


def _scores(group: pd.DataFrame) -> pd.Series:
    est = bootstrap_mae(group["predicted"], group["true"], group["prompt_id"], n_boot=N_BOOT)
    return pd.Series({"mae": est.value, "mae_lo": est.lo, "mae_hi": est.hi,
                      "kendall_tau": kendall_tau(group["predicted"], group["true"]), "n": len(group),
                      "prompts": est.n})


def score_table(frame: pd.DataFrame) -> pd.DataFrame:
    """MAE with its 95% bootstrap CI over prompts, Kendall tau, and row and prompt counts per (predictor,
    family, scenario), plus scenario ``all``."""
    cols = ["predictor", "family", "scenario", "mae", "mae_lo", "mae_hi", "kendall_tau", "n", "prompts"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    keys = ["predictor", "family"]
    per = frame.groupby([*keys, "scenario"]).apply(_scores, include_groups=False).reset_index()
    overall = frame.groupby(keys).apply(_scores, include_groups=False).reset_index().assign(scenario=ALL)
    out = pd.concat([per, overall], ignore_index=True)[cols]
    out[["n", "prompts"]] = out[["n", "prompts"]].astype(int)
    return out


def paired_vs_reference(rows: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Every predictor against ``reference`` on the runs both predicted (one split, one step): MAE of each
    and MAE(predictor) - MAE(reference) with a paired bootstrap CI over prompts (negative: better)."""
    cols = ["predictor", "family", "n", "prompts", "mae", "reference_mae", "difference", "diff_lo", "diff_hi"]
    ref = rows[rows["predictor"] == reference].set_index("run_id")["predicted"]
    out = []
    for (name, family), group in rows[rows["predictor"] != reference].groupby(["predictor", "family"]):
        both = group[group["run_id"].isin(ref.index)]
        if both.empty:
            continue
        ref_pred = both["run_id"].map(ref)
        diff = paired_mae_difference(both["predicted"], ref_pred, both["true"], both["prompt_id"], n_boot=N_BOOT)
        out.append({"predictor": name, "family": family, "n": len(both), "prompts": diff.n,
                    "mae": mae(both["predicted"], both["true"]), "reference_mae": mae(ref_pred, both["true"]),
                    "difference": diff.value, "diff_lo": diff.lo, "diff_hi": diff.hi})
    return pd.DataFrame(out, columns=cols).sort_values("difference", ignore_index=True)


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
