"""``lenscope predict`` and ``lenscope.api`` on a fresh clone: an empty store, the shipped predictors of
data/predictors and the real embedded SmolLM2-135M (loaded by each CLI call, and once here for the API; the
bad-input test needs no model and runs in the fast set)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest

from lenscope.api import load_predictor, predict
from lenscope.cli import main
from lenscope.jobs.predictors.catalog import CATALOG
from lenscope.jobs.predictors.predict import QUANTILE_COLUMNS
from lenscope.store.store import Store

PROMPTS = ["What is 2+2?", "Write a haiku about rain in the city at night.",
           "Explain step by step how the tides of the oceans are caused by the moon and the sun, with examples."]
HEADS = ["egtp", "mean", "max", "last"]
COLUMNS = ["id", "predictor", "predicted_tokens", *QUANTILE_COLUMNS, "prompt_tokens"]


@pytest.fixture
def empty_store(store):
    """The test's own empty LENSCOPE_DATA_DIR: nothing trained, no datasets; the shipped predictors only."""
    assert store.datasets_frame().empty and store.predictors_frame().empty
    return store


@pytest.fixture(scope="module")
def egtp():
    """The shipped egtp head on the model it names (loaded by the API, once for this file)."""
    return load_predictor("egtp")


@pytest.mark.model
def test_predict_writes_one_row_per_prompt_and_predictor_from_the_shipped_heads(empty_store, tmp_path, capsys):
    prompts, out = tmp_path / "prompts.txt", tmp_path / "predictions.csv"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    assert main(["predict", "--prompts", str(prompts), "--predictor", ",".join(HEADS), "--out", str(out)]) == 0
    assert f"12 predictions (3 prompts x 4 predictors) written to {out}" in capsys.readouterr().out
    frame = pd.read_csv(out, dtype={"id": str})
    assert list(frame.columns) == COLUMNS and len(frame) == 12
    assert frame["predictor"].tolist() == [h for h in HEADS for _ in PROMPTS]
    assert frame["id"].tolist() == ["1", "2", "3"] * 4
    values = frame[["predicted_tokens", *QUANTILE_COLUMNS]].to_numpy()
    assert np.isfinite(values).all() and (values > 0).all()
    assert (frame["q10_tokens"] <= frame["q50_tokens"]).all() and (frame["q50_tokens"] <= frame["q90_tokens"]).all()
    tokens = frame["prompt_tokens"].to_numpy().reshape(4, 3)
    assert (tokens == tokens[0]).all() and tokens[0, 0] < tokens[0, 1] < tokens[0, 2]  # one prefill for all heads
    assert Store().datasets_frame().empty and Store().predictors_frame().empty  # predicting stores nothing


@pytest.mark.model
def test_predict_all_on_one_prompt_prints_every_predictor(empty_store, tmp_path, capsys):
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"id": "rain", "prompt": "Write a haiku about rain."}\n')
    assert main(["predict", "--prompts", str(prompts), "--predictor", "all"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"id": str})
    assert list(frame.columns) == COLUMNS and frame["predictor"].tolist() == list(CATALOG)
    assert (frame["id"] == "rain").all()
    assert np.isfinite(frame["predicted_tokens"]).all() and (frame["predicted_tokens"] > 0).all()
    frame = frame.set_index("predictor")
    quantiles = frame[list(QUANTILE_COLUMNS)]
    assert quantiles.loc[["egtp", "mean", "max", "last", "plp"]].notna().all().all()
    assert quantiles.loc[["probe", "drafter", "constant"]].isna().all().all()  # no bin distribution: no quantiles
    given = quantiles.dropna()
    assert (given["q10_tokens"] <= given["q50_tokens"]).all() and (given["q50_tokens"] <= given["q90_tokens"]).all()
    assert frame.loc["constant", "predicted_tokens"] == 238.0


def test_bad_input_fails_with_a_message_before_the_model_loads(empty_store, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("lenscope.cli.predict.load_target", lambda args: pytest.fail("loaded the model"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["predict", "--prompts", str(empty), "--predictor", "egtp"]) == 2
    assert "lenscope predict: error: empty.txt holds no prompts" in capsys.readouterr().err
    empty.write_text("Hello\n")
    assert main(["predict", "--prompts", str(empty), "--predictor", "egtp,nope"]) == 2
    assert "unknown predictor 'nope'; choose from egtp, mean" in capsys.readouterr().err
    assert main(["predict", "--prompts", str(empty), "--predictor", "egtp", "--dataset", "study"]) == 2
    assert "dataset 'study' has no runs" in capsys.readouterr().err


@pytest.mark.model
def test_the_api_predicts_a_frame_and_several_predictors_share_one_model(egtp, empty_store):
    out = egtp.predict(["Hello"])
    assert list(out.columns) == [c for c in COLUMNS if c != "predictor"] and len(out) == 1
    row = out.iloc[0]
    assert row["id"] == "1" and math.isfinite(row["predicted_tokens"]) and row["predicted_tokens"] > 0
    assert 0 < row["q10_tokens"] <= row["q50_tokens"] <= row["q90_tokens"]
    assert egtp.manifest["name"] == "egtp" and egtp.manifest["training_data"]["runs"] == 3014
    both = predict(["Hello", PROMPTS[2]], ["egtp", "constant"], target=egtp.target)
    assert both["predictor"].tolist() == ["egtp", "egtp", "constant", "constant"]
    assert both["predicted_tokens"].iloc[0] == pytest.approx(row["predicted_tokens"], rel=1e-4)  # batch of 2 vs 1
    assert both["predicted_tokens"].iloc[2:].tolist() == [238.0, 238.0]
