"""The shipped predictors' answer-length prediction for a typed prompt, set beside the true length once the
answer is generated (Token entropy page)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from lenscope.app.widgets import show_table
from lenscope.jobs.predictors.catalog import CATALOG, shipped_names, shipped_predictor, shipped_summary
from lenscope.jobs.predictors.predict import QUANTILE_COLUMNS, LengthPredictor, predict_prompts
from lenscope.models.target import TargetModel


@st.cache_resource(show_spinner="Loading the shipped predictors...", max_entries=2)
def _shipped(_target: TargetModel, target_key: str) -> list[LengthPredictor]:
    """Every shipped predictor made for the loaded model (none for another model)."""
    files = [shipped_predictor(n) for n in shipped_names()]
    return [LengthPredictor(f, _target) for f in files if f.model == _target.source.spec]


def predict_typed(target: TargetModel, prompt: str) -> pd.DataFrame | None:
    """The shipped predictors' predictions for ``prompt`` (None when none was made for this model)."""
    predictors = _shipped(target, target.key)
    return predict_prompts(target, [prompt], predictors) if predictors else None


def show_predictions(frame: pd.DataFrame, true_length: int | None, finished: bool = True) -> None:
    """Each predictor's prediction with its q10-q90 interval, and (once generated) the true length."""
    low, high = QUANTILE_COLUMNS[0], QUANTILE_COLUMNS[-1]
    shown = pd.DataFrame({
        "predictor": frame["predictor"],
        "what": [CATALOG[n].description for n in frame["predictor"]],
        "predicted tokens": frame["predicted_tokens"].round(0),
        "80% interval": [f"{lo:.0f}-{hi:.0f}" if pd.notna(lo) else "" for lo, hi in zip(frame[low], frame[high])],
    })
    if true_length is not None:
        shown["error (predicted - true)"] = (frame["predicted_tokens"] - true_length).round(0)
        shown["true inside the interval"] = [("yes" if lo <= true_length <= hi else "no") if pd.notna(lo) else ""
                                             for lo, hi in zip(frame[low], frame[high])]
    show_table(shown, "predictions", hide_index=True, width="stretch")
    truth = ("" if true_length is None else f" The answer has **{true_length} tokens**"
             + ("." if finished else " (cut at the token cap: the true length is longer)."))
    st.caption("Predicted from the prompt alone, before any answer token, by the predictors trained on the "
               "shipped study (`python -m lenscope predict`). The interval is the soft-label head's 10th to 90th "
               "percentile; its coverage on the study's test runs is in each predictor's manifest "
               "(data/predictors/NAME/manifest.json). One sampled answer is one draw: its length varies from seed "
               f"to seed.{truth}")


def shipped_table() -> None:
    """The shipped predictors' accuracy on the study's test runs (step 0, before any answer token)."""
    table = shipped_summary()
    if table.empty:
        st.info("No predictor is shipped with this copy; `python -m lenscope study --size full` trains and ships them.")
        return
    show_table(table.round({c: 1 for c in table.columns if c != "interval coverage"}).round(3), "shipped-predictors",
               hide_index=True, width="stretch")
    st.caption("Test MAE in tokens with its 95% bootstrap CI over prompts, and the paired difference to the "
               "constant train median on the same runs (negative: better than the constant), on the study's test "
               "split; interval coverage: how often the 10th-90th percentile interval held the true length (80% if "
               "calibrated).")
