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


def mae_by_step(frame: pd.DataFrame, max_step: int | None = None) -> pd.DataFrame:
    """MAE of remaining-length predictions per decoding step (columns step, mae, n).

    ``frame`` has one row per (run, step) with columns step, predicted, true.
    """
    data = frame if max_step is None else frame[frame["step"] <= max_step]
    err = (data["predicted"] - data["true"]).abs()
    out = err.groupby(data["step"]).agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "mae", "size": "n"})
