"""The controls' rules on hand-made arrays: exclusion of template tokens, normalisation within a run, partial
correlation, per-run correlations, the permutation null, and the run-clustered correlation bootstrap."""

import numpy as np
import pytest

from lenscope.analysis.core.metrics import bootstrap_correlation
from lenscope.analysis.egtp.controls import (
    RunTokens,
    content_tokens,
    normalise_within_run,
    per_run_correlations,
    permutation_null,
    permutation_p,
    residualise,
)


def test_content_tokens_drop_the_template_and_keep_position_and_norm():
    hidden = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0], [6.0, 8.0], [0.0, 0.5]])
    entropy = np.array([9.0, 9.0, 1.0, 2.0, 3.0])
    run = content_tokens(7, hidden, entropy, 2, {"gradient": np.array([0.1, 0.2, 0.3])})
    assert run.run_id == 7
    assert run.entropy.tolist() == [1.0, 2.0, 3.0]
    assert run.position.tolist() == [2.0, 3.0, 4.0]
    assert run.log_norm == pytest.approx(np.log([2.0, 10.0, 0.5]))
    assert run.importance["gradient"].tolist() == [0.1, 0.2, 0.3]
    with pytest.raises(ValueError, match="cover the 3 tokens"):
        content_tokens(7, hidden, entropy, 2, {"gradient": np.ones(5)})
    with pytest.raises(ValueError, match="outside"):
        content_tokens(7, hidden, entropy, 5, {"gradient": np.ones(0)})


def test_normalisation_divides_by_the_run_mean_and_removes_the_run_scale():
    assert normalise_within_run(np.array([1.0, 2.0, 3.0])).tolist() == [0.5, 1.0, 1.5]
    x = np.array([0.2, 0.7, 0.1, 4.0])
    assert normalise_within_run(1e4 * x) == pytest.approx(normalise_within_run(x))
    assert np.isnan(normalise_within_run(np.zeros(3))).all()
    flat = np.float32(0.009105) * (1 + np.array([0, 1e-7, -1e-7], dtype=np.float32))  # float32 rounding only
    assert np.isnan(normalise_within_run(flat)).all() and np.isnan(normalise_within_run(np.ones(1))).all()


def test_partial_correlation_removes_a_shared_driver():
    rng = np.random.default_rng(0)
    position = np.arange(400, dtype=float) % 40
    x = position + rng.normal(0, 3, 400)
    y = position + rng.normal(0, 3, 400)
    assert np.corrcoef(x, y)[0, 1] > 0.9
    partial = np.corrcoef(residualise(x, position[:, None]), residualise(y, position[:, None]))[0, 1]
    assert abs(partial) < 0.1
    r = np.corrcoef([x, y, position])
    textbook = (r[0, 1] - r[0, 2] * r[1, 2]) / np.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    assert partial == pytest.approx(textbook)


def test_residuals_are_orthogonal_to_every_covariate():
    rng = np.random.default_rng(1)
    cov = rng.normal(size=(50, 2))
    res = residualise(rng.normal(size=50) + cov @ [2.0, -1.0] + 5, cov)
    assert res.mean() == pytest.approx(0, abs=1e-12)
    assert cov.T @ res == pytest.approx([0, 0], abs=1e-10)


def _run(run_id: int, entropy, importance) -> RunTokens:
    n = len(entropy)
    return RunTokens(run_id, np.asarray(entropy, float), {"m": np.asarray(importance, float)},
                     np.arange(n, dtype=float), np.zeros(n))


def test_per_run_correlations_skip_runs_where_either_side_is_constant():
    runs = [_run(1, [1, 2, 3, 4], [1, 2, 3, 5]), _run(2, [1, 2, 3], [3, 2, 1]), _run(3, [1, 2, 3], [2, 2, 2]),
            _run(4, [1, 2], [1, 2])]
    ids, pearson, spearman = per_run_correlations(runs, "m")
    assert ids.tolist() == [1, 2]
    assert pearson[0] == pytest.approx(np.corrcoef([1, 2, 3, 4], [1, 2, 3, 5])[0, 1])
    assert pearson[1] == pytest.approx(-1.0) and spearman.tolist() == pytest.approx([1.0, -1.0])


def test_permutation_null_shuffles_only_within_runs():
    """Entropy constant within each (interleaved) run: no within-run shuffle can change it, so the null is the
    observed r every time."""
    groups = np.array([0, 1, 0, 2, 1, 2, 0, 1])
    entropy = groups.astype(float)
    importance = groups + np.array([0.1, -0.2, 0.0, 0.3, 0.1, -0.1, 0.2, 0.0])
    pearson, spearman = permutation_null(entropy, importance, groups, n_perm=20)
    assert pearson == pytest.approx(np.full(20, np.corrcoef(entropy, importance)[0, 1]))
    assert len(spearman) == 20


def test_permutation_null_is_centred_at_zero_for_run_normalised_importance():
    """A shuffle keeps each run's entropies, so an association of run means survives it (raw importance); run-
    normalised importance has mean 1 in every run, and its null is centred at 0."""
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(60), 12)
    entropy = rng.random(groups.size) * 3
    importance = 1 + entropy + rng.normal(0, 0.5, groups.size)
    raw, _ = permutation_null(entropy, importance, groups, n_perm=300, seed=3)
    assert raw.mean() > 0.03
    norm = np.concatenate([normalise_within_run(importance[groups == g]) for g in range(60)])
    pearson, spearman = permutation_null(entropy, norm, groups, n_perm=300, seed=3)
    assert abs(pearson.mean()) < 0.01 and abs(spearman.mean()) < 0.02
    assert np.quantile(pearson, 0.975) < 0.1 < np.corrcoef(entropy, norm)[0, 1]


def test_bootstrap_correlation_resamples_runs_and_flags_constants():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(30), 10)
    x = rng.normal(size=300)
    y = x + rng.normal(size=300)
    est = bootstrap_correlation(x, y, groups, n_boot=300)
    assert est.value == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert est.lo < est.value < est.hi and est.n == 30
    assert np.isnan(bootstrap_correlation(x, np.full(300, 2.0) + 1e-17 * x, groups, n_boot=10).value)


def test_permutation_p_is_two_sided_around_the_null_mean_and_never_zero():
    null = np.linspace(-0.1, 0.1, 99) + 0.2  # a null centred at 0.2, as for raw importance
    assert permutation_p(0.5, null) == pytest.approx(1 / 100)
    assert permutation_p(-0.1, null) == pytest.approx(1 / 100)  # as far below the centre counts the same
    assert permutation_p(0.2, null) == pytest.approx(1)
    assert permutation_p(0.25, null) == pytest.approx((1 + np.sum(np.abs(null - 0.2) >= 0.05 - 1e-12)) / 100)
    assert np.isnan(permutation_p(np.nan, null)) and np.isnan(permutation_p(0.1, np.full(5, np.nan)))
