"""Error metrics, bootstrap CIs and the per-step constant-mean reference."""

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.core.metrics import bootstrap_ratio, mae, mae_by_step, pooled_group_means


def test_mae_and_errors():
    assert mae([1, 2, 3], [2, 2, 5]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        mae([1], [1, 2])


def test_mae_by_step():
    frame = pd.DataFrame({"step": [0, 0, 1, 2], "predicted": [5, 7, 3, 9], "true": [6, 6, 3, 1]})
    out = mae_by_step(frame, max_step=1)
    assert out["step"].tolist() == [0, 1] and out["mae"].tolist() == [1.0, 0.0] and out["n"].tolist() == [2, 1]


def test_bootstrap_mae_brackets_the_estimate_and_resamples_prompts_together():
    from lenscope.analysis.core.metrics import bootstrap_mae

    rng = np.random.default_rng(0)
    true = rng.integers(10, 500, 200).astype(float)
    pred = true + rng.normal(0, 40, 200)
    est = bootstrap_mae(pred, true, n_boot=500)
    assert est.lo < est.value < est.hi and est.n == 200
    assert est.value == pytest.approx(np.abs(pred - true).mean())
    # four samples per prompt: the CI is over 50 prompts, and wider than pretending 200 independent rows
    groups = np.repeat(np.arange(50), 4)
    clustered = bootstrap_mae(np.repeat(pred[:50], 4), np.repeat(true[:50], 4), groups, n_boot=500)
    naive = bootstrap_mae(np.repeat(pred[:50], 4), np.repeat(true[:50], 4), n_boot=500)
    assert clustered.n == 50 and (clustered.hi - clustered.lo) > 1.5 * (naive.hi - naive.lo)


def test_paired_difference_finds_a_real_gap_and_not_a_fake_one():
    from lenscope.analysis.core.metrics import paired_mae_difference

    rng = np.random.default_rng(1)
    true = rng.integers(10, 500, 300).astype(float)
    good, bad = true + rng.normal(0, 20, 300), true + rng.normal(0, 60, 300)
    gap = paired_mae_difference(good, bad, true, n_boot=500)
    assert gap.value < 0 and gap.hi < 0 and gap.excludes_zero()
    twin = good + rng.normal(0, 1, 300)
    same = paired_mae_difference(good, twin, true, n_boot=500)
    assert same.lo < 0 < same.hi and not same.excludes_zero()
    assert str(gap).count("[") == 1


def test_constant_reference_is_the_per_step_train_median_of_remaining_length():
    from lenscope.analysis.results.leaderboard import REFERENCE, constant_predictions, paired_vs_reference

    runs = pd.DataFrame({"run_id": [1, 2, 3, 4, 5], "prompt_id": [1, 2, 3, 4, 5], "scenario": "chat",
                         "output_tokens": [10, 30, 50, 200, 20], "split": ["train"] * 4 + ["test"]})
    ref = constant_predictions(runs, steps=[0, 20])
    at0, at20 = ref[ref["step"] == 0], ref[ref["step"] == 20]
    assert (at0["predicted"] == 40.0).all() and len(at0) == 5  # the median of 10, 30, 50, 200 (mean: 72.5)
    assert set(at20["run_id"]) == {2, 3, 4}  # only runs still generating after 20 tokens
    assert (at20["predicted"] == 30.0).all() and list(at20["true"]) == [10.0, 30.0, 180.0]  # median of 10, 30, 180
    rows = pd.concat([ref[ref["step"] == 0], ref[ref["step"] == 0].assign(predictor="exact", family="x",
                                                                           predicted=lambda f: f["true"])])
    paired = paired_vs_reference(rows.assign(predictor=rows["predictor"].fillna(REFERENCE)))
    assert list(paired["predictor"]) == ["exact"] and paired["difference"].iloc[0] < 0


def test_bootstrap_ratio_of_sums_and_its_paired_difference():
    accepted, evaluated = np.array([3, 0, 5, 2]), np.array([4, 2, 5, 4])
    est = bootstrap_ratio(accepted, evaluated)
    assert est.value == pytest.approx(10 / 15) and est.lo <= est.value <= est.hi and est.n == 4
    same = bootstrap_ratio(accepted, evaluated, baseline=(accepted, evaluated))
    assert (same.value, same.lo, same.hi) == (0.0, 0.0, 0.0)
    better = bootstrap_ratio(evaluated, evaluated, baseline=(accepted, evaluated))
    assert better.value == pytest.approx(1 - 10 / 15) and better.lo > 0
    clustered = bootstrap_ratio(accepted, evaluated, groups=["a", "a", "b", "b"])
    assert clustered.n == 2 and clustered.value == pytest.approx(10 / 15)
    assert np.isnan(bootstrap_ratio([0, 0], [0, 0]).value)


def test_pooled_group_means_give_every_group_the_pooled_spread():
    from scipy.stats import t

    out = pooled_group_means([1.0, 2.0, 3.0, 5.0, 10.0], ["a", "a", "b", "b", "c"]).set_index("group")
    assert out["value"].tolist() == [1.5, 4.0, 10.0] and out["n"].tolist() == [2, 2, 1]
    half = np.sqrt((0.25 + 0.25 + 1 + 1) / 2) * t.ppf(0.975, 2)  # pooled variance over 2 degrees of freedom
    assert out.loc["a", "hi"] - out.loc["a", "value"] == pytest.approx(half / np.sqrt(2))
    assert out.loc["c", "hi"] - out.loc["c", "value"] == pytest.approx(half)  # one value: the pooled spread still
    assert np.isnan(pooled_group_means([1.0, 2.0], ["a", "b"])["lo"]).all()  # no repetition anywhere: no CI
