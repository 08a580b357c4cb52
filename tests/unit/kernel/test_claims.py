"""The claims on out-of-fold predictions: every run predicted by models that never saw its conversation, seeds in
the CIs, Holm levels, effect-size verdicts, the median constant, clipped MAE over censored runs, and stored folds
read back instead of retrained."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.core.splits import fold_of
from lenscope.analysis.egtp.training import HeadConfig
from lenscope.cli import main
from lenscope.jobs.results import claims, crossval, cv_learners
from lenscope.jobs.results.claims import CLAIMS_KIND, claims_markdown, claims_report, stored_claims_table
from lenscope.jobs.results.crossval import Fold, cv_runs, oof_predictions
from lenscope.jobs.results.cv_learners import ATTENTION, CONSTANT, median_constant, static_name
from tests.egtp_data import SYNTHETIC_LAYER, synthetic_dataset

L = SYNTHETIC_LAYER


def _report(store, seeds=2):
    return claims_report(store, "syn", L, L, folds=3, seeds=seeds, head_epochs=15, probe_epochs=2, baselines=())


def test_claims_are_judged_out_of_fold_with_seeds(store, capsys):
    synthetic_dataset(store, "syn", n=160, censored_every=8)
    report = _report(store)
    table = report.claims.set_index("claim")
    egtp = table.loc[f"{static_name('egtp')} < median constant (static)"]
    assert egtp["verdict"] == "reproduced"  # the length sits in the top-entropy token: EGTP pooling finds it
    assert egtp["prompts"] >= 120 and egtp["clipped_runs"] > egtp["runs"]  # censored runs enter the clipped MAE
    assert egtp["lo"] <= egtp["lo95"] <= egtp["difference"] <= egtp["hi95"] <= egtp["hi"]  # Holm widens the CI
    assert egtp["family"] == table["level"].notna().sum()  # the Holm family: the table's judged rows
    pooling = table.loc[[f"EGTP pooling < {p} pooling (static)" for p in ("max", "last", "mean")]]
    assert pooling["paper_effect"].lt(0).all() and pooling["level"].ge(0.95).all()
    assert table.loc["OUTLETS drafter < target probe (dynamic, steps 0-32)", "verdict"].startswith("not measured")
    assert table.loc["PLP MAE falls from step 0 to step 32", "runs"] >= 0
    summary = report.predictors.set_index("predictor")
    assert summary.loc[static_name("egtp"), "seeds"] == summary.loc[ATTENTION, "seeds"] == 2
    assert summary.loc[CONSTANT, "seeds"] == 1
    assert f"{ATTENTION} < median constant (static)" in table.index  # the attribution's head, out of fold too
    assert (summary["runs"] == 140).all()  # every finished run scored out of fold (static rows at step 0)
    assert set(report.by_scenario) == {"chat", "reasoning"}  # 70 prompts each: judged per scenario
    assert stored_claims_table(store, "syn")["verdict"].tolist() == report.claims["verdict"].tolist()
    assert claims_markdown(report.claims).count("\n") == len(table) + 1

    def no_training(*args, **kwargs):
        raise AssertionError("a stored fold was trained again")

    with pytest.MonkeyPatch.context() as monkey:
        monkey.setattr(cv_learners, "train_heads", no_training)
        monkey.setattr(cv_learners, "train_probe", no_training)
        monkey.setattr(cv_learners, "train_attention_head", no_training)
        again = _report(store)  # every fold and seed is read back from the store
        # the command line too, at this test's epochs (its own defaults would train every fold again)
        monkey.setattr(claims, "claims_report", partial(claims_report, head_epochs=15, probe_epochs=2))
        assert main(["claims", "--dataset", "syn", "--layer", str(L), "--probe-layer", str(L), "--folds", "3",
                     "--seeds", "2", "--no-pia"]) == 0
    assert again.claims["difference"].equals(report.claims["difference"])
    out = capsys.readouterr().out
    assert "Holm" in out and "## Predictors (out of fold)" in out and "not cross-validated: baseline" in out


def test_out_of_fold_predictions_never_saw_the_conversation(store):
    synthetic_dataset(store, "syn", n=60)
    runs = cv_runs(store, "syn")
    seen: dict[int, set] = {}

    def spy(fold: Fold, on_progress):
        seen[fold.fold] = set(fold.runs.loc[fold.mask("train") | fold.mask("val"), "group"])
        return median_constant().fit_predict(fold, on_progress)

    learner = crossval.Learner("spy", True, spy, seeds=1)
    frame = oof_predictions(store, "syn", learner, folds=4, runs=runs)
    assert set(frame["run_id"]) == set(runs["run_id"])
    assert all(g not in seen[f] for g, f in zip(frame["group"], frame["fold"]))
    assert (frame["fold"] == [fold_of(g, 4) for g in frame["group"]]).all()


def test_median_constant_is_the_training_median_per_step(store):
    synthetic_dataset(store, "syn", n=60)
    runs = cv_runs(store, "syn")
    fold = Fold(runs, 0, 3, 0)
    pred = median_constant().fit_predict(fold, lambda *a: None)
    train = runs.loc[fold.mask("train") | fold.mask("val"), "output_tokens"].to_numpy()
    at0 = pred[pred["step"] == 0]["predicted"].unique()
    assert at0.tolist() == [np.median(train)]
    at5 = pred[pred["step"] == 5]["predicted"].unique()
    assert at5.tolist() == [np.median(train[train > 5] - 5)]
    assert set(pred["run_id"]) == set(runs.loc[fold.test, "run_id"])
    assert isinstance(pred, pd.DataFrame) and store.results_frame(CLAIMS_KIND).empty


def test_censored_runs_with_features_of_their_first_answer_steps_give_the_same_claims(data_dir, tmp_path):
    from lenscope.jobs.results.crossval import CENSORED_ANSWER_TOKENS
    from lenscope.store.store import Store

    reports = []
    for name, cut in (("whole", None), ("cut", CENSORED_ANSWER_TOKENS)):
        store = Store(url=f"sqlite:///{tmp_path}/{name}.db", tensor_dir=tmp_path / f"{name}-tensors")
        synthetic_dataset(store, "syn", n=80, censored_every=4, censored_answer_tokens=cut)
        runs = store.runs_frame("syn")
        assert runs["feature_positions"].notna().sum() == (0 if cut is None else 10)  # censored, longer than 33
        reports.append(_report(store, seeds=1))
    whole, cut = reports
    pd.testing.assert_frame_equal(whole.claims, cut.claims)  # every step it reads of a censored run is kept
    pd.testing.assert_frame_equal(whole.predictors, cut.predictors)


@pytest.mark.parametrize("which", ["aware head", "PLP"])
def test_folds_and_seeds_side_by_side_predict_as_one_at_a_time_and_are_stored_each(store, which):
    synthetic_dataset(store, "syn", n=60, censored_every=6)
    runs = cv_runs(store, "syn")
    inputs = cv_learners.StudyInputs(store, runs, L, L)
    head = HeadConfig(epochs=3)
    learner = (cv_learners.static_head(inputs, "egtp", replace(head, censoring="aware"), cv_learners.CENSORING_AWARE)
               if which == "aware head" else cv_learners.plp_learner(inputs, replace(head, batch_size=64)))
    folds = [Fold(runs, fold, 3, seed) for fold in range(3) for seed in range(2)]
    together = learner.fit_predict_many(folds, lambda *a: None)
    for fold, frame in zip(folds, together):
        pd.testing.assert_frame_equal(frame, learner.fit_predict(fold, lambda *a: None))
    labels = []
    frame = oof_predictions(store, "syn", learner, folds=3, seeds=2, runs=runs,
                            on_progress=lambda d, t, label: labels.append(label))
    assert "folds and seeds side by side (6/6) · training" in labels[-2]
    assert len(store.results_frame(crossval.CV_KIND)) == 6  # one stored result per fold and seed
    for fold, part in zip(folds, together):
        kept = frame[(frame["fold"] == fold.fold) & (frame["seed"] == fold.seed)]
        assert kept["predicted"].tolist() == part["predicted"].tolist()
