"""Bring your own predictor: prediction files (parsing, errors, metrics, confusion), the empirical and trace-column
predictors, their storage, and the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.core.metrics import bootstrap_kendall_tau, bootstrap_mae
from lenscope.analysis.scheduler import SimConfig, make_predictor, simulate
from lenscope.analysis.scheduler.external_predictions import (
    BOOT_PAIRS,
    PredictionPairs,
    PredictionsFormat,
    confusion_table,
    evaluate_predictions,
    load_predictions_file,
    predictions_format,
)
from lenscope.analysis.scheduler.length_buckets import bucket_labels, bucket_of, quantile_edges
from lenscope.analysis.scheduler.predictors import EmpiricalPredictor
from lenscope.analysis.scheduler.traces import MAX_ROWS, column_mapping, load_trace_file, trace_hash

# Hand computation: |1-1| + |3-2| + |2-3| + |4-4| = 2 over 4 pairs -> MAE 0.5; of the 6 pairs of rows only
# (2, 3) is discordant -> tau = (5 - 1) / 6.
HAND = b"true_tokens,predicted_tokens\n1,1\n2,3\n3,2\n4,4\n"
ONE_SLOT = SimConfig(mode="colocated", n_decode=1, max_batch_size=1)


def test_mae_and_kendall_tau_match_a_hand_computation():
    pairs = load_predictions_file(HAND)
    assert pairs.true.tolist() == [1, 2, 3, 4] and pairs.predicted.tolist() == [1, 3, 2, 4] and not pairs.classes
    ev = evaluate_predictions(pairs)
    assert ev.n == 4 and ev.n_boot == 1000
    assert ev.mae.value == pytest.approx(0.5) and ev.mae.lo <= 0.5 <= ev.mae.hi and ev.mae.n == 4
    assert ev.kendall_tau.value == pytest.approx(4 / 6)
    assert ev.kendall_tau.lo <= 4 / 6 <= ev.kendall_tau.hi
    assert ev.lines()[:3] == ["n = 4 pairs", f"MAE 0.5 [{ev.mae.lo:.1f}, {ev.mae.hi:.1f}] tokens",
                              "Kendall tau: too few pairs to judge (n = 4)"]  # the value is kept, not shown


def test_bootstrap_kendall_tau_interval():
    rng = np.random.default_rng(0)
    true = rng.integers(1, 1000, 400)
    perfect = bootstrap_kendall_tau(true * 2.0, true, n_boot=50)
    assert [perfect.value, perfect.lo, perfect.hi] == pytest.approx([1.0, 1.0, 1.0]) and perfect.n == 400
    noisy = bootstrap_kendall_tau(true + rng.normal(0, 300, 400), true, n_boot=300)
    assert 0.2 < noisy.lo < noisy.value < noisy.hi < 0.8 and noisy.hi - noisy.lo < 0.15
    flat = bootstrap_kendall_tau(np.ones(5), np.arange(5), n_boot=20)
    assert np.isnan(flat.value) and np.isnan(flat.lo) and np.isnan(flat.hi)


def test_columns_are_found_by_name_or_mapping_and_jsonl_reads_too():
    jsonl = b'{"output_tokens": 10, "prediction": 12.5, "prompt": "x"}\n{"output_tokens": 20, "prediction": 3}\n'
    pairs = load_predictions_file(jsonl)
    assert pairs.true.tolist() == [10, 20] and pairs.predicted.tolist() == [12.5, 3.0] and not pairs.classes
    mapped = load_predictions_file(b"len,guess\n5,6\n7,8\n", predictions_format("true=len, predicted=guess"))
    assert mapped.true.tolist() == [5, 7] and mapped.predicted.tolist() == [6, 8]
    classes = load_predictions_file(b"true_length,predicted_class\n5,0\n700,2\n")
    assert classes.classes and classes.lengths() is None and classes.policy_values().tolist() == [0, 2]
    forced = load_predictions_file(b"true,predicted\n5,0\n700,2\n", predictions_format(classes=True))
    assert forced.classes and forced.bucket_edges is None


def test_bad_files_are_refused_with_their_lines():
    with pytest.raises(ValueError, match=r"no true-length column \(one of true_tokens.*columns are \['a', 'b'\]"):
        load_predictions_file(b"a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match=r"no prediction column .*predicted_class"):
        load_predictions_file(b"true_tokens,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match=r"no column 'zz'; its columns are \['len', 'guess'\]"):
        load_predictions_file(b"len,guess\n5,6\n", predictions_format("true=len,predicted=zz"))
    with pytest.raises(ValueError) as err:
        load_predictions_file(b"true_tokens,predicted_tokens\n10,5\nx,3\n12,-1\n0,abc\n7,inf\n")
    msg = str(err.value)
    assert "'true_tokens' needs whole numbers from 1 to 10,000,000: lines 3, 5 (2 rows)" in msg
    assert "'predicted_tokens' needs numbers from 0 to 10,000,000" in msg and "lines 4, 5, 6 (3 rows)" in msg
    with pytest.raises(ValueError, match="the predictions file is empty"):
        load_predictions_file(b"  \n")
    with pytest.raises(ValueError, match="has no rows"):
        load_predictions_file(b"true_tokens,predicted_tokens\n")
    with pytest.raises(ValueError, match="at least 2 rows"):
        load_predictions_file(b"true_tokens,predicted_tokens\n5,6\n")
    with pytest.raises(ValueError, match=r"'predicted_class' needs class indices from 0 to 1 .*lines 3, 4 \(2 rows\)"):
        load_predictions_file(b"true_tokens,predicted_class\n5,1\n6,2\n7,0.5\n", predictions_format(
            bucket_edges="0,10,20"))
    with pytest.raises(ValueError, match="not a JSON-lines predictions file"):
        load_predictions_file(b'{"true": 1, "predicted": 2}\n{oops\n')


def test_uploads_keep_their_stated_limit_and_files_from_disk_have_none(store, tmp_path):
    from lenscope.jobs.scheduler.external_predictions import import_predictions

    big = b"true_tokens,predicted_tokens\n" + b"5,6\n" * (MAX_ROWS + 1)
    with pytest.raises(ValueError, match=r"more than 200,000 rows"):
        load_predictions_file(big)
    with pytest.raises(ValueError, match=r"more than 200,000 rows"):
        import_predictions(store, big)  # bytes: a browser upload
    assert len(load_predictions_file(big, max_bytes=None, max_rows=None).true) == MAX_ROWS + 1
    (tmp_path / "big.csv").write_bytes(big)
    imported = import_predictions(store, tmp_path / "big.csv")  # a path: read whole
    assert imported.evaluation.n == MAX_ROWS + 1 and imported.evaluation.mae.value == 1.0


def test_beyond_boot_pairs_the_cis_come_from_a_subsample_scaled_to_all_pairs():
    rng = np.random.default_rng(1)
    true = rng.integers(1, 2000, 2 * BOOT_PAIRS)
    predicted = np.maximum(true + rng.normal(0, 200, true.size), 0)
    ev = evaluate_predictions(PredictionPairs(true, predicted))
    full = bootstrap_mae(predicted, true, n_boot=ev.n_boot)
    assert ev.n_boot == 200 and ev.mae.n == ev.kendall_tau.n == true.size
    assert ev.mae.value == pytest.approx(np.abs(predicted - true).mean())
    assert ev.mae.lo < ev.mae.value < ev.mae.hi and ev.kendall_tau.lo < ev.kendall_tau.value < ev.kendall_tau.hi
    assert ev.mae.hi - ev.mae.lo == pytest.approx(full.hi - full.lo, rel=0.2)  # the full bootstrap's width
    assert ev.lines()[-1] == ("[95% bootstrap CIs over pairs, 200 resamples of a 50,000-pair subsample, scaled to "
                              "all pairs]")
    small = evaluate_predictions(PredictionPairs(true[:BOOT_PAIRS], predicted[:BOOT_PAIRS]))
    assert small.mae == bootstrap_mae(predicted[:BOOT_PAIRS], true[:BOOT_PAIRS], n_boot=200)  # unchanged up to it
    assert small.lines()[-1] == "[95% bootstrap CIs over pairs, 200 resamples]"


@pytest.mark.parametrize("predicted, warned", [
    ([0, 4, 2, 1, 3, 4], True), ([1, 19, 2, 1, 3, 4], True), ([0, 20, 2, 1, 3, 4], False),
    ([0, 4.5, 2, 1, 3, 4], False), ([0, 400, 2, 1, 3, 4], False)])
def test_small_whole_token_predictions_below_most_true_lengths_look_like_classes(predicted, warned):
    true = np.array([50, 120, 300, 80, 700, 90])  # median 105
    warning = PredictionPairs(true, np.array(predicted, dtype=float)).class_index_warning()
    assert (warning is not None) == warned
    if warned:
        assert f"whole number from {min(predicted)} to {max(predicted)}" in warning and "median true length is 105 " \
            "tokens: these look like class indices" in warning
    assert PredictionPairs(true, np.array(predicted, dtype=float), classes=True).class_index_warning() is None
    assert load_predictions_file(HAND).class_index_warning() is None  # lengths 1..4 predicted as 1..4


@pytest.mark.parametrize("columns, edges, why", [
    ("true=a,true=b", "", "each once"), ("truth=a", "", "got 'truth=a'"), ("", "0,x", "comma-separated numbers"),
    ("", "5", "at least 2 increasing"), ("", "0,10,10", "at least 2 increasing"), ("", "-1,5", "non-negative")])
def test_bad_reading_options_are_named(columns, edges, why):
    with pytest.raises(ValueError, match=why):
        predictions_format(columns, bucket_edges=edges)


def test_edges_need_class_predictions():
    with pytest.raises(ValueError, match="need class indices"):
        PredictionsFormat(classes=False, bucket_edges=(0, 10))


def test_classes_with_edges_stand_for_bucket_midpoints():
    pairs = load_predictions_file(b"true_tokens,predicted_class\n50,0\n150,1\n300,2\n250,2\n",
                                  predictions_format(bucket_edges="0,100,200,400"))
    assert pairs.classes and pairs.lengths().tolist() == [50, 150, 300, 300]
    ev = evaluate_predictions(pairs)
    assert ev.mae.value == pytest.approx(50 / 4)  # only 250 -> 300 misses
    assert ev.kendall_tau.value == pytest.approx(kendall_by_hand([0, 1, 2, 2], [50, 150, 300, 250]))
    assert ev.confusion.index.tolist() == ["[0, 100)", "[100, 200)", "[200, 400]"]
    assert ev.confusion.to_numpy().tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 2]]


def kendall_by_hand(p, t) -> float:
    """Kendall's tau-b by counting pairs."""
    c = d = tp = tt = 0
    for i in range(len(p)):
        for j in range(i + 1, len(p)):
            s = np.sign(p[i] - p[j]) * np.sign(t[i] - t[j])
            c, d = c + (s > 0), d + (s < 0)
            tp, tt = tp + (p[i] == p[j] and t[i] != t[j]), tt + (t[i] == t[j] and p[i] != p[j])
    return (c - d) / np.sqrt((c + d + tp) * (c + d + tt))


def test_rank_only_classes_have_tau_and_a_confusion_but_no_mae():
    true = [10, 20, 30, 40, 50, 60]
    pairs = PredictionPairs(np.array(true), np.array([0.0, 0, 1, 0, 1, 1]), classes=True)
    ev = evaluate_predictions(pairs)
    assert ev.mae is None and "MAE not computed" in ev.lines()[1]
    assert ev.kendall_tau.value == pytest.approx(kendall_by_hand([0, 0, 1, 0, 1, 1], true))
    assert ev.confusion.columns.tolist() == ["class 0", "class 1"]
    assert ev.confusion.index.tolist() == ["[10, 40)", "[40, 60]"]  # two quantile buckets, one per class
    assert ev.confusion.to_numpy().tolist() == [[2, 1], [1, 2]]


def test_confusion_of_token_predictions_cuts_both_at_the_true_quantiles():
    pairs = PredictionPairs(np.arange(1, 11), np.array([1.0, 1, 9, 4, 5, 6, 7, 8, 9, 99]))
    table = confusion_table(pairs)
    edges = quantile_edges(np.arange(1, 11), 5)
    assert edges.tolist() == [1, 3, 5, 7, 9, 10]
    assert table.index.tolist() == table.columns.tolist() == bucket_labels(edges)
    expected = pd.crosstab(bucket_of(np.arange(1, 11), edges), bucket_of(pairs.predicted, edges))
    assert table.to_numpy().tolist() == expected.reindex(index=range(5), columns=range(5), fill_value=0).values.tolist()
    assert table.to_numpy().sum() == 10 and table.iloc[1, 4] == 1  # true 3 predicted 9
    evaluated = evaluate_predictions(pairs)
    assert type(evaluated).from_dict(evaluated.to_dict()).confusion.equals(evaluated.confusion)


def empirical_file(rng) -> tuple[np.ndarray, np.ndarray]:
    """Four true lengths, each with its own error distribution."""
    true = np.repeat([100, 200, 400, 800], 300)
    errors = np.concatenate([rng.normal(0, 10, 300), rng.normal(150, 5, 300), rng.choice([-300, 300], 300),
                             rng.exponential(400, 300)])
    return true, np.maximum(true + errors, 1.0)


def test_empirical_predictor_reproduces_the_files_error_per_bucket():
    rng = np.random.default_rng(0)
    pair_true, pair_pred = empirical_file(rng)
    trace_true = rng.choice([100, 200, 400, 800], 20_000)
    predictor = EmpiricalPredictor(trace_true, pair_true, pair_pred, seed=3)
    drawn = np.array([predictor.static(i) for i in range(len(trace_true))])
    for length in (100, 200, 400, 800):
        file_err = pair_pred[pair_true == length] - length
        sim_err = drawn[trace_true == length] - length
        assert set(np.round(sim_err, 6)) <= set(np.round(file_err, 6))  # drawn from the same bucket only
        assert sim_err.mean() == pytest.approx(file_err.mean(), abs=0.05 * file_err.std() + 1)
        assert sim_err.std() == pytest.approx(file_err.std(), rel=0.05)
        assert np.quantile(sim_err, 0.9) == pytest.approx(np.quantile(file_err, 0.9), abs=0.1 * file_err.std() + 1)
    again = EmpiricalPredictor(trace_true, pair_true, pair_pred, seed=3)
    other = EmpiricalPredictor(trace_true, pair_true, pair_pred, seed=4)
    assert [again.static(i) for i in range(50)] == drawn[:50].tolist()
    assert [other.static(i) for i in range(50)] != drawn[:50].tolist()
    beyond = EmpiricalPredictor(np.array([5000, 1]), pair_true, pair_pred)
    assert beyond.static(0) in set(pair_pred[pair_true == 800]) and beyond.static(1) in set(pair_pred[pair_true == 100])
    assert predictor.remaining(0, 10) == max(drawn[0] - 10, 1.0)


def test_rank_only_empirical_predictions_keep_their_order_and_drive_sjf():
    pairs = PredictionPairs(np.array([10, 10, 50, 50, 90, 90]), np.array([0.0, 0, 1, 1, 2, 2]), classes=True)
    trace = pd.DataFrame({"arrival_s": [0.0, 0.001, 0.002, 0.003], "prompt_tokens": [8] * 4,
                          "output_tokens": [50, 90, 50, 10]})
    predictor = make_predictor("empirical", trace["output_tokens"].to_numpy(), pairs=pairs)
    assert [predictor.static(i) for i in range(4)] == [1, 2, 1, 0]
    assert predictor.remaining(1, 500) == 2  # a rank, not tokens: progress does not change it
    sjf = simulate(trace, predictor, ONE_SLOT.with_(queue="sjf")).requests
    assert sjf.sort_values("finish_s")["rid"].tolist() == [0, 3, 2, 1]


def test_trace_column_is_read_mapped_hashed_and_drives_sjf():
    data = b"arrival,prompt_tokens,output_tokens,predicted_tokens\n0,8,50,900\n0.001,8,10,800\n0.002,8,30,5\n"
    trace = load_trace_file(data)
    assert trace["predicted_tokens"].tolist() == [900, 800, 5]
    assert trace_hash(trace) != trace_hash(trace.assign(predicted_tokens=[900, 800, 6]))
    assert trace_hash(trace.drop(columns="predicted_tokens")) == trace_hash(load_trace_file(
        b"arrival,prompt_tokens,output_tokens\n0,8,50\n0.001,8,10\n0.002,8,30\n"))
    mapped = load_trace_file(b"t,in,out,guess\n0,8,50,1.5\n", column_mapping("arrival=t,prompt=in,output=out,"
                                                                               "predicted=guess"))
    assert mapped["predicted_tokens"].tolist() == [1.5]
    with pytest.raises(ValueError, match=r"no column 'nope'"):
        load_trace_file(b"t,in,out\n0,8,50\n", column_mapping("arrival=t,prompt=in,output=out,predicted=nope"))
    with pytest.raises(ValueError, match=r"'predicted_tokens' needs numbers from 0 .*lines 3 \(1 rows\)"):
        load_trace_file(data.replace(b",800\n", b",soon\n"))
    predictor = make_predictor("trace-column", trace["output_tokens"].to_numpy(),
                               predicted=trace["predicted_tokens"].to_numpy())
    sjf = simulate(trace, predictor, ONE_SLOT.with_(queue="sjf")).requests
    assert sjf.sort_values("finish_s")["rid"].tolist() == [0, 2, 1]  # 0 runs alone, then by the trace's predictions
    with pytest.raises(ValueError, match="no predicted_tokens column"):
        make_predictor("trace-column", trace["output_tokens"].to_numpy())


def test_imported_files_are_kept_in_the_store_and_feed_simulations(store):
    from lenscope.jobs.scheduler.external_predictions import import_predictions, stored_pairs
    from lenscope.jobs.scheduler.replay import PredictorSpec, build_predictor, run_simulation

    first = import_predictions(store, HAND, name="hand.csv")
    again = import_predictions(store, HAND)
    assert not first.cached and again.cached and again.key == first.key
    assert again.evaluation.lines() == first.evaluation.lines()
    assert stored_pairs(store, first.key).predicted.tolist() == [1, 3, 2, 4]
    as_classes = import_predictions(store, HAND, PredictionsFormat(classes=True))
    assert as_classes.key != first.key and as_classes.evaluation.mae is None
    trace = pd.DataFrame({"arrival_s": np.arange(6) * 0.01, "prompt_tokens": [8] * 6,
                          "output_tokens": [1, 2, 3, 4, 2, 3]})
    spec = PredictorSpec(kind="empirical", predictions=first.key)
    assert build_predictor(store, spec, trace).static(0) == 1.0  # true length 1 -> the pair (1, 1)
    outcome = run_simulation(store, trace, spec, ONE_SLOT)
    assert not outcome.cached and outcome.summary["predictor"] == f"empirical (file {first.key[:8]})"
    assert run_simulation(store, trace, spec, ONE_SLOT).cached
    ranks = PredictorSpec(kind="empirical", predictions=as_classes.key)
    assert not run_simulation(store, trace, ranks, ONE_SLOT).cached
    with pytest.raises(ValueError, match="no imported predictions file"):
        build_predictor(store, PredictorSpec(kind="empirical", predictions="0" * 64), trace)
    with pytest.raises(ValueError, match="no predicted_tokens column"):
        build_predictor(store, PredictorSpec(kind="trace-column"), trace)


def test_cli_evaluates_predictions_and_simulates_with_them(data_dir, tmp_path, capsys):
    from lenscope.cli import main

    (tmp_path / "hand.csv").write_bytes(HAND)
    assert main(["evaluate-predictions", str(tmp_path / "hand.csv")]) == 0
    out = capsys.readouterr().out
    assert "predictions as token lengths" in out and "n = 4 pairs" in out
    assert "MAE 0.5 [" in out and "Kendall tau: too few pairs to judge (n = 4)" in out and "1,000 resamples" in out
    assert main(["evaluate-predictions", str(tmp_path / "hand.csv"), "--classes"]) == 0
    out = capsys.readouterr().out
    assert "MAE not computed" in out and "Kendall tau: too few pairs to judge (n = 4)" in out and "class 3" in out
    assert main(["evaluate-predictions", str(tmp_path / "hand.csv"), "--bucket-edges", "0,2,4,6,8,10"]) == 0
    assert "MAE 3.5 [" in capsys.readouterr().out  # classes 1, 3, 2, 4 -> midpoints 3, 7, 5, 9 vs 1, 2, 3, 4
    (tmp_path / "bad.csv").write_text("true_tokens,predicted_tokens\n5,x\n")
    assert main(["evaluate-predictions", str(tmp_path / "bad.csv")]) == 2
    assert "'predicted_tokens' needs numbers from 0" in capsys.readouterr().err
    assert main(["evaluate-predictions", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err

    (tmp_path / "trace.csv").write_text("arrival,prompt_tokens,output_tokens,predicted_tokens\n0,8,4,3\n0.5,9,2,2\n")
    sim = ["simulate", "--trace", str(tmp_path / "trace.csv"), "--queue", "sjf"]
    assert main([*sim, "--predictor", "empirical", "--predictions", str(tmp_path / "hand.csv")]) == 0
    out = capsys.readouterr().out
    assert "predictions hand.csv: n = 4 pairs, MAE 0.5 [" in out
    assert "| empirical (file " in out and "| 2 requests" in out
    assert main([*sim, "--predictor", "trace-column"]) == 0
    assert "| trace column predicted_tokens |" in capsys.readouterr().out
    assert main([*sim, "--predictor", "empirical"]) == 2
    assert "--predictor empirical and --predictions PATH go together" in capsys.readouterr().err
    assert main([*sim, "--bucket-edges", "0,5"]) == 2
    assert "read a --predictions file" in capsys.readouterr().err
    (tmp_path / "plain.csv").write_text("arrival,prompt_tokens,output_tokens\n0,8,4\n")
    assert main(["simulate", "--trace", str(tmp_path / "plain.csv"), "--predictor", "trace-column"]) == 2
    assert "no predicted_tokens column" in capsys.readouterr().err


def test_cli_evaluates_a_100k_row_file(data_dir, tmp_path, capsys):
    from lenscope.cli import main

    rng = np.random.default_rng(7)
    true = rng.integers(1, 4000, 100_000)
    predicted = np.round(np.maximum(true * rng.lognormal(0, 0.3, true.size), 1), 1)
    pd.DataFrame({"true_tokens": true, "predicted_tokens": predicted}).to_csv(tmp_path / "ssjf.csv", index=False)
    assert main(["evaluate-predictions", str(tmp_path / "ssjf.csv")]) == 0
    out = capsys.readouterr().out
    assert "predictions as token lengths" in out and "n = 100,000 pairs" in out and "warning" not in out
    assert f"MAE {np.abs(predicted - true).mean():.1f} [" in out
    assert "200 resamples of a 50,000-pair subsample, scaled to all pairs" in out


def test_cli_warns_when_token_predictions_look_like_class_indices(data_dir, tmp_path, capsys):
    from lenscope.cli import main

    rng = np.random.default_rng(3)
    true = rng.integers(20, 1000, 500)
    classes = np.digitize(true, [64, 128, 256, 512])  # 0..4
    pd.DataFrame({"true_tokens": true, "prediction": classes}).to_csv(tmp_path / "cls.csv", index=False)
    assert main(["evaluate-predictions", str(tmp_path / "cls.csv")]) == 0
    out = capsys.readouterr().out
    assert "warning: cls.csv: every prediction is a whole number from 0 to 4 (5 distinct values)" in out
    assert "rerun with --classes" in out and "--bucket-edges" in out
    assert "tokens (meaningless if the predictions are class indices)" in out
    assert out.index("warning:") < out.index("MAE")
    assert main(["evaluate-predictions", str(tmp_path / "cls.csv"), "--classes"]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out and "class indices, ranks only" in out and "MAE not computed" in out
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,8,40\n0.5,9,300\n")
    assert main(["simulate", "--trace", str(trace), "--queue", "sjf", "--predictor", "empirical", "--predictions",
                 str(tmp_path / "cls.csv")]) == 0
    out = capsys.readouterr().out
    assert "warning: cls.csv:" in out and "tokens (meaningless if the predictions are class indices)" in out
