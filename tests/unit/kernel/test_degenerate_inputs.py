"""Inputs too small or not text: Kendall tau of a few pairs is not judged, a prompt holding a lone surrogate is one
line wherever a prompt enters, and a dataset whose runs all hit the cap says so to the simulator."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from lenscope.analysis.scheduler.external_predictions import (
    MIN_TAU_PAIRS,
    PredictionPairs,
    evaluate_predictions,
    load_predictions_file,
)
from lenscope.cli import main
from lenscope.jobs.predictors.predict import predict_prompts, read_prompts
from lenscope.jobs.runs.generate import generate_cached
from lenscope.jobs.scheduler.replay import dataset_trace
from lenscope.models.engine import GenerationSettings
from lenscope.store.store import NewRun
from tests.fakes import fake_generation, fake_target

SURROGATE = "the prompt holds a lone surrogate (U+D800) at character {}: not valid Unicode text"


def test_kendall_tau_of_fewer_than_ten_pairs_is_not_judged():
    three = evaluate_predictions(load_predictions_file(b"true_tokens,predicted_tokens\n1,1\n2,2\n3,3\n"))
    assert three.tau_text() == "too few pairs to judge (n = 3)"
    assert three.lines()[2] == "Kendall tau: too few pairs to judge (n = 3)"
    true = np.arange(1, MIN_TAU_PAIRS + 1, dtype=float)
    enough = evaluate_predictions(PredictionPairs(true, true[::-1].copy()))
    assert enough.tau_text() == "-1.000 [-1.000, -1.000]" and enough.lines()[2].startswith("Kendall tau -1.000 [")


def test_the_evaluate_command_says_too_few_pairs(data_dir, tmp_path, capsys):
    (tmp_path / "three.csv").write_text("true_tokens,predicted_tokens\n1,1\n2,2\n3,3\n")
    assert main(["evaluate-predictions", str(tmp_path / "three.csv")]) == 0
    out = capsys.readouterr().out
    assert "Kendall tau: too few pairs to judge (n = 3)" in out and "1.000 [1.000, 1.000]" not in out


def test_a_lone_surrogate_is_refused_before_the_run_key_is_hashed(store):
    with pytest.raises(ValueError) as info:
        generate_cached(store, fake_target(), "hi \ud800", GenerationSettings(4))
    assert str(info.value) == SURROGATE.format(3)
    assert store.runs_frame().empty


def test_a_lone_surrogate_is_one_line_from_the_model_and_from_a_prompt_list(target):
    with pytest.raises(ValueError) as info:
        target.chat_ids("\ud800")
    assert str(info.value) == SURROGATE.format(0)
    with pytest.raises(ValueError) as info:  # the Token entropy page's predictions of a typed prompt
        predict_prompts(target, ["Name a fruit.", "x\ud800"], [])
    assert str(info.value) == "prompt 2: " + SURROGATE.format(1)


def test_a_lone_surrogate_in_a_prompts_file_is_one_line_before_the_model_loads(data_dir, tmp_path, monkeypatch,
                                                                               capsys):
    monkeypatch.setattr("lenscope.cli.predict.load_target", lambda args: pytest.fail("loaded the model"))
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "Name a fruit."}, {"id": "b", "prompt": "x\ud800"}]  # JSON writes the escape \ud800
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ValueError) as info:
        read_prompts(path)
    assert str(info.value) == "prompts.jsonl line 2: " + SURROGATE.format(1)
    assert main(["predict", "--prompts", str(path), "--predictor", "constant"]) == 2
    assert capsys.readouterr().err.strip() == "lenscope predict: error: prompts.jsonl line 2: " + SURROGATE.format(1)
    path.write_text(json.dumps({"id": "\udfff", "prompt": "Name a fruit."}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: the id holds a lone surrogate \(U\+DFFF\) at character 0"):
        read_prompts(path)


def test_a_dataset_whose_runs_all_hit_the_cap_is_said_to_the_simulator(store, data_dir, capsys):
    target = fake_target()
    dataset_id = store.ensure_dataset("capped", store.ensure_model(target), {})
    for i in range(3):
        gen = replace(fake_generation(5, 4, seed=i), finished=False)
        (run_id,) = store.save_runs(target, [NewRun(f"Question {i}?", gen, "sharegpt", f"c{i}")])
        store.add_to_dataset(dataset_id, run_id, "chat")
    said = ("dataset 'capped' has 3 runs, all censored at the token cap (their true lengths are unknown); collect it "
            "again with a larger --max-new-tokens")
    for split in ("test", None):
        with pytest.raises(ValueError) as info:
            dataset_trace(store, "capped", qps=1.0, split=split)
        assert str(info.value) == said
    assert len(dataset_trace(store, "capped", qps=1.0, split=None, include_censored=True)) == 3
    assert main(["simulate", "--dataset", "capped", "--qps", "1", "--split", "all"]) == 2
    assert capsys.readouterr().err.strip() == f"lenscope simulate: error: {said}"
