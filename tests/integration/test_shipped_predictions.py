"""The shipped predictors reproduce the study: predicting a test prompt of the shipped study from its text gives
the prediction the shipped results record for that run (same head, same features, no store)."""

from __future__ import annotations

import numpy as np
import pytest

from lenscope.api import load_predictor, predict
from lenscope.jobs.predictors.catalog import CATALOG
from lenscope.jobs.runs.generations import read_header
from lenscope.jobs.runs.table import generations_table
from lenscope.jobs.study.pipeline import SHIPPED
from lenscope.jobs.study.shipped import shipped_study

KEYS = ["task", "scenario", "prompt_tokens"]
CHECKED = ("egtp", "max", "plp", "probe", "ssjf-reg", "trail")


def recorded_test_prompts(n: int = 5):
    """``n`` test runs of the shipped results whose prompt the shipped generations file names unambiguously,
    with the prediction the results record for each of :data:`CHECKED`."""
    study = shipped_study()
    path = SHIPPED / "study-generations.jsonl.gz"
    assert read_header(path)["dataset"] == study.dataset
    texts = generations_table(path).drop_duplicates(KEYS + ["prompt"])
    texts = texts[~texts.duplicated(KEYS, keep=False)]
    runs = study.runs().merge(texts[KEYS + ["prompt"]], on=KEYS)
    frame = study.results_frame()
    frame = frame[(frame["step"] == 0) & (frame["split"] == "test")]
    picked = runs[runs["run_id"].isin(frame["run_id"])].drop_duplicates("prompt").head(n)
    recorded = {name: frame[frame["predictor"] == CATALOG[name].store_name(study.dataset)]
                .set_index("run_id").loc[picked["run_id"], "predicted"].to_numpy() for name in CHECKED}
    return picked["prompt"].tolist(), recorded


@pytest.mark.model
def test_shipped_predictors_give_the_predictions_the_study_recorded(data_dir):
    prompts, recorded = recorded_test_prompts()
    assert len(prompts) == 5
    target = load_predictor("constant").target
    out = predict(prompts, CHECKED, target=target)
    for name in CHECKED:
        ours = out.loc[out["predictor"] == name, "predicted_tokens"].to_numpy()
        assert np.allclose(ours, recorded[name], atol=0.5), (name, ours, recorded[name])
