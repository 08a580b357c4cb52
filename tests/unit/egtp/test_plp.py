"""PLP samples (remaining length L - t at steps 0..L-1) and training on a synthetic store."""

import numpy as np
import pytest
import torch

from lenscope.analysis.egtp.plp import (
    EVAL_STEPS,
    plp_inputs,
    plp_steps,
    remaining_frame,
    training_steps,
    visible_positions,
)
from lenscope.analysis.egtp.pooling import pool
from lenscope.analysis.egtp.training import HeadConfig
from lenscope.jobs.egtp.heads import PLP_KIND, feature_table, train_plp
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.jobs.runs.features import run_features
from tests.egtp_data import SYNTHETIC_LAYER, synthetic_dataset


def test_targets_are_remaining_length():
    frame = remaining_frame(7, 5)
    assert frame["step"].tolist() == [0, 1, 2, 3, 4]
    assert (frame["true"] == 5 - frame["step"]).all()
    assert plp_steps(100, max_step=32).tolist() == list(range(33))
    spread = training_steps(1000, dense=32, later=64)
    assert spread[:33].tolist() == list(range(33)) and len(spread) == 33 + 64 and spread[-1] == 999
    assert len(set(spread)) == len(spread) and (np.diff(spread) > 0).all()
    assert training_steps(50, dense=32, later=64).tolist() == list(range(50))  # short runs: every step
    assert visible_positions(12, 3) == 15


def test_inputs_concat_prompt_generated_summary_and_step():
    prompt, prefix = torch.randn(4), torch.randn(6, 4)
    x = plp_inputs(prompt, prefix, [0, 1, 5])
    assert x.shape == (3, 9)
    assert torch.equal(x[:, :4], prompt.expand(3, 4))
    assert torch.equal(x[0, 4:8], torch.zeros(4))
    assert torch.equal(x[2, 4:8], prefix[4])
    assert torch.allclose(x[:, 8], torch.log1p(torch.tensor([0.0, 1.0, 5.0])))


def test_run_features_summarise_only_visible_answer_tokens(store):
    run_id = synthetic_dataset(store, n=1)[0]
    run = store.load_run(run_id)
    feats = run_features(store, run_id, SYNTHETIC_LAYER, 1.0)
    h, ent, p = run.features.hidden[SYNTHETIC_LAYER], run.features.entropy, run.prompt_len
    for t in (1, 3, run.output_length):
        assert torch.allclose(feats["generated.egtp"][t - 1], pool(h[p:p + t], ent[p:p + t]), atol=1e-5)
    assert torch.allclose(feats["prompt.egtp"], pool(h[:p], ent[:p]), atol=1e-6)
    assert run_features(store, run_id, SYNTHETIC_LAYER, 1.0)["prompt.max"].equal(feats["prompt.max"])


def test_train_plp_stores_eval_rows_with_splits(store):
    synthetic_dataset(store, n=30)
    curve = train_plp(store, "syn", SYNTHETIC_LAYER, config=HeadConfig(epochs=3, batch_size=64, hidden=16))
    assert curve["step"].min() == 0 and curve["step"].max() <= EVAL_STEPS
    pred = store.predictors_frame(PLP_KIND)
    preds = store.predictions_frame(int(pred["predictor_id"].iloc[0]))
    runs = feature_table(store, "syn", SYNTHETIC_LAYER).runs.set_index("run_id")
    lengths = preds["run_id"].map(runs["output_tokens"])
    assert (preds["true"] == lengths - preds["step"]).all()
    assert preds["step"].max() == EVAL_STEPS and (preds["true"] >= 1).all()
    assert (preds["split"] == preds["run_id"].map(dataset_runs(store, "syn").set_index("run_id")["split"])).all()
    assert np.isfinite(preds["predicted"]).all()


def test_runs_with_features_of_their_first_answer_steps_are_scored_not_trained_on(store):
    from lenscope.jobs.drafter.training import train_probe_job
    from lenscope.jobs.egtp.heads import load_head, plp_trajectory

    synthetic_dataset(store, n=30, censored_every=3, censored_answer_tokens=8)  # every answer is longer
    runs = dataset_runs(store, "syn", include_censored=True)
    cut = runs[runs["censored"]]
    assert len(cut) == 10 and cut["feature_positions"].notna().all() and runs["finished"].eq(
        runs["feature_positions"].isna()).all()
    config = HeadConfig(epochs=2, batch_size=64, hidden=16)
    for train in (lambda: train_plp(store, "syn", SYNTHETIC_LAYER, config=config, include_censored=True),
                  lambda: train_probe_job(store, "syn", SYNTHETIC_LAYER, epochs=1, include_censored=True)):
        with pytest.raises(ValueError, match="10 censored run.* first answer tokens only"):
            train()
    train_plp(store, "syn", SYNTHETIC_LAYER, config=config)  # finished runs only: every step is there
    pred = store.predictors_frame(PLP_KIND).iloc[0]
    head, meta = load_head(pred["artifact_path"])
    run = store.load_run(int(cut["run_id"].iloc[0]), layers=[SYNTHETIC_LAYER])
    trajectory = plp_trajectory(store, head, meta, run)  # the steps its features reach
    assert run.features_cut and trajectory["step"].tolist() == list(range(9))
    assert (trajectory["true"] == run.output_length - trajectory["step"]).all()
    whole = store.load_run(int(runs.loc[runs["finished"], "run_id"].iloc[0]), layers=[SYNTHETIC_LAYER])
    assert plp_trajectory(store, head, meta, whole)["step"].tolist() == list(range(whole.output_length))
