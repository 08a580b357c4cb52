"""Baselines: each learns a synthetic length signal better than the constant train median; the PiA parser
survives junk answers; the jobs train, cache and register every baseline on a tiny real dataset."""

import math

import numpy as np
import pytest
import torch

from lenscope.analysis.baselines.ltr import (
    QuantileMap,
    listmle_loss,
    pairwise_loss,
    ranking_scores,
    train_ranker,
)
from lenscope.analysis.baselines.pia import TOKENS_PER_WORD, parse_length_answer
from lenscope.analysis.baselines.proxy import (
    bucket_predict,
    equal_width_bins,
    train_bucket_classifier,
    train_regressor,
)
from lenscope.analysis.baselines.trail import train_trail
from lenscope.analysis.core.metrics import kendall_tau
from lenscope.analysis.egtp.training import HeadConfig


@pytest.fixture(scope="module")
def signal():
    """Features [N, 8] whose first two coordinates set the length (20..420 tokens), plus noise features."""
    torch.manual_seed(0)
    x = torch.randn(240, 8)
    y = 20 + 400 * torch.sigmoid(1.5 * x[:, 0] - x[:, 1])
    return x[:160], y[:160], x[160:200], y[160:200], x[200:], y[200:]


def _beats_constant(pred, y_train, y_test, factor=0.7) -> float:
    ours = float(np.abs(np.asarray(pred) - y_test.numpy()).mean())
    constant = float((y_test - y_train.mean()).abs().mean())
    assert ours < factor * constant, (ours, constant)
    return ours


def test_ssjf_regressor_beats_constant(signal):
    x, y, _, _, xt, yt = signal
    probe = train_regressor(x, y, epochs=40, batch_size=32, seed=0, hidden=64)
    _beats_constant(probe.predict(xt).numpy(), y, yt)


@pytest.mark.parametrize("scheme", ["log", "equal"])
def test_bucket_classifiers_beat_constant(signal, scheme):
    x, y, xv, yv, xt, yt = signal
    head = train_bucket_classifier(x, y, scheme, 10, HeadConfig(epochs=40, batch_size=32, hidden=64, seed=0), xv, yv)
    pred = bucket_predict(head, xt)
    assert set(np.unique(pred)) <= set(head.centers.numpy().tolist())  # hard bucket decisions
    _beats_constant(pred, y, yt)


def test_equal_width_buckets():
    bins = equal_width_bins([10, 20, 95, 100], k=4)
    assert bins.inner_edges.tolist() == [25, 50, 75]
    assert bins.centers.tolist() == [15, 37.5, 62.5, 97.5]  # mean length when filled, midpoint when empty


def test_trail_probe_beats_constant(signal):
    x, y, _, _, xt, yt = signal
    probe = train_trail(x, y, layer=15, epochs=80, batch_size=16, seed=0, hidden=64)
    assert probe.config.mode == "classification" and probe.config.layer == 15
    _beats_constant(probe.predict(xt).numpy(), y, yt)


@pytest.mark.parametrize("loss", ["listmle", "pairwise"])
def test_ranker_orders_and_calibrates(signal, loss):
    x, y, xv, yv, xt, yt = signal
    scorer, qmap = train_ranker(x, y, loss, HeadConfig(epochs=30, batch_size=32, hidden=64, seed=0), xv, yv)
    scores = ranking_scores(scorer, xt)
    assert kendall_tau(scores, yt.numpy()) > 0.6
    _beats_constant(qmap(scores), y, yt)


def test_ranking_losses_prefer_the_true_order():
    lengths = torch.tensor([10.0, 50.0, 200.0])
    right, wrong = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([2.0, 1.0, 0.0])
    for loss in (listmle_loss, pairwise_loss):
        assert loss(right, lengths) < loss(wrong, lengths)


def test_quantile_map_is_monotone_and_matches_training_quantiles():
    qmap = QuantileMap.fit([3.0, 1.0, 2.0], [100, 10, 50])
    assert qmap([1.0, 2.0, 3.0]).tolist() == [10, 50, 100]
    assert qmap([-5.0, 1.5, 9.0]).tolist() == [10, 30, 100]


@pytest.mark.parametrize("answer, tokens", [
    ("250 tokens", 250),
    ("about fifty", 50 * TOKENS_PER_WORD),
    ("100-200", 150 * TOKENS_PER_WORD),
    ("Between 100 and 200 words.", 150 * TOKENS_PER_WORD),
    ("Approximately 120\u2013150 words", 135 * TOKENS_PER_WORD),
    ("two hundred and ten words", 210 * TOKENS_PER_WORD),
    ("My answer: 3 paragraphs, around 300 words.", 300 * TOKENS_PER_WORD),
    ("1,200", 1200 * TOKENS_PER_WORD),
    ("1.5k tokens", 1500),
    ("a hundred words", 100 * TOKENS_PER_WORD),
    ("fifty-five", 55 * TOKENS_PER_WORD),
    ("2 paragraphs", 200 * TOKENS_PER_WORD),
])
def test_pia_parser_reads_numbers_words_ranges_and_units(answer, tokens):
    est = parse_length_answer(answer, fallback=77)
    assert not est.flagged and math.isclose(est.tokens, tokens), est


@pytest.mark.parametrize("answer", ["", "Sure! Here is my answer:", "I cannot know that.", "0 words", None])
def test_pia_parser_flags_answers_without_a_number(answer):
    est = parse_length_answer(answer, fallback=77)
    assert est.flagged and est.tokens == 77 and "median" in est.reason


def test_pia_estimates_beat_constant_on_junky_answers(signal):
    _, y, _, _, _, yt = signal
    phrasings = ["about {w} words", "{lo}-{hi} words", "I think it will be {w} words long.", "roughly {w}"]
    answers = [phrasings[i % 4].format(w=round(v / TOKENS_PER_WORD), lo=round(0.8 * v / TOKENS_PER_WORD),
                                       hi=round(1.2 * v / TOKENS_PER_WORD)) if i % 7 else "No idea!"
               for i, v in enumerate(yt.tolist())]
    estimates = [parse_length_answer(a, float(y.median())) for a in answers]
    assert sum(e.flagged for e in estimates) == sum(1 for i in range(len(yt)) if i % 7 == 0)
    _beats_constant([e.tokens for e in estimates], y, yt)


def test_baseline_jobs_train_memoise_and_register(store, target, monkeypatch):
    """Every baseline on a tiny real dataset: predictions for every run, artifacts, cached embeddings and
    PiA answers (a second run loads neither the encoder nor asks the model again)."""
    from lenscope.analysis.data.prompts import PromptItem
    from lenscope.jobs.predictors import baselines as baseline_jobs
    from lenscope.jobs.predictors.baselines import (
        BASELINES,
        BaselineConfig,
        train_baselines,
    )
    from lenscope.jobs.results.leaderboard import benchmark_frame
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.models.engine import GenerationSettings

    prompts = [PromptItem(f"Name {k} {thing}.", "user", f"{k}{thing}") for k in ("one", "two", "three")
               for thing in ("fruits", "planets", "colours", "rivers")]
    collect_dataset(store, target, "tiny", prompts, GenerationSettings(max_new_tokens=6, temperature=1.0, seed=1),
                    layers=[15])
    cfg = BaselineConfig(epochs=3, trail_layer=15, pia_max_new_tokens=6)
    seen = []
    results = train_baselines(store, "tiny", BASELINES, target, cfg, include_censored=True,  # 6-token answers
                              on_progress=lambda d, n, label: seen.append(label))
    assert [r.name for r in results] == [f"{b}:tiny" for b in BASELINES]
    assert {"encoding prompts", "asking the target (PiA)", "train ltr (listmle)"} <= set(seen)
    runs = store.runs_frame("tiny")
    predictors = store.predictors_frame("baseline")
    assert sorted(predictors["name"]) == sorted(r.name for r in results)
    for row in predictors.itertuples():
        preds = store.predictions_frame(row.predictor_id)
        assert sorted(preds["run_id"]) == sorted(runs["run_id"]) and (preds["step"] == 0).all()
        assert (preds["true"].to_numpy() == runs.set_index("run_id").loc[preds["run_id"], "output_tokens"]).all()
        assert np.isfinite(preds["predicted"]).all() and row.metrics["eval_split"] in ("test", "val", "train")
        assert __import__("pathlib").Path(row.artifact_path).exists()
    pia = predictors.set_index("name").loc["pia:tiny"]
    assert 0 <= pia["metrics"]["flagged"] <= len(runs)

    def fail(*a, **k):
        raise AssertionError("should have come from the cache")

    monkeypatch.setattr(baseline_jobs, "load_encoder", fail)
    monkeypatch.setattr(baseline_jobs, "ask_lengths", fail)
    train_baselines(store, "tiny", ["ssjf-reg", "pia"], target, cfg, include_censored=True)
    frame = benchmark_frame(store, "tiny", include_censored=True)
    assert {"constant (train median)", "ssjf-reg:tiny", "ltr:tiny"} <= set(frame["predictor"])
    assert len(store.predictors_frame("baseline")) == len(BASELINES)  # retraining replaced, not duplicated


def test_cli_rejects_unknown_baselines(data_dir, capsys):
    from lenscope.cli import main

    assert main(["train-baselines", "--dataset", "any", "--only", "ssjf-reg,oracle"]) == 2
    assert "unknown baselines ['oracle']" in capsys.readouterr().err


def test_an_estimate_past_the_cap_is_clipped_and_says_so():
    est = parse_length_answer("About 40000000000000 words.", fallback=77, cap=1024)
    assert est.tokens == 1024 and not est.flagged and "clipped to 1024" in est.reason
    assert parse_length_answer("About 100 words.", fallback=77, cap=1024).tokens == pytest.approx(100 * TOKENS_PER_WORD)
