"""Error metrics of length predictors."""

from __future__ import annotations

import numpy as np
import pandas as pd


def mae(predicted, true) -> float:
    """Mean absolute error."""
    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    if p.shape != t.shape or p.size == 0:
        raise ValueError(f"need equal, non-empty shapes, got {p.shape} and {t.shape}")
    return float(np.abs(p - t).mean())


def constant_mean_mae(train_true, eval_true) -> float:
    """MAE on ``eval_true`` of the constant predictor that always says the mean of ``train_true``."""
    fit = np.asarray(train_true, dtype=float)
    if fit.size == 0:
        raise ValueError("the constant baseline needs at least one training length")
    target = np.asarray(eval_true, dtype=float)
    return mae(np.full(target.shape, fit.mean()), target)


def mae_by_step(frame: pd.DataFrame, max_step: int | None = None) -> pd.DataFrame:
    """MAE of remaining-length predictions per decoding step (columns step, mae, n).

    ``frame`` has one row per (run, step) with columns step, predicted, true.
    """
    data = frame if max_step is None else frame[frame["step"] <= max_step]
    err = (data["predicted"] - data["true"]).abs()
    out = err.groupby(data["step"]).agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "mae", "size": "n"})
