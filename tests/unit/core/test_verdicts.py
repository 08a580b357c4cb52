"""Effect-size verdicts (every label, each boundary), baseline checks, intervals named by their level, Holm's levels,
and the bootstrap over prompts and seeds."""

from __future__ import annotations

import numpy as np
import pytest

from lenscope.analysis.core.metrics import seeded_bootstrap
from lenscope.analysis.core.verdicts import (
    CHECK_FAILED,
    CHECK_PASSED,
    CHECK_UNDECIDED,
    CONTRADICTED,
    INCONCLUSIVE,
    LABELS,
    MIN_PROMPTS,
    PAIRED_LABELS,
    REPRODUCED,
    RULED_OUT,
    SIZE_RULED_OUT,
    VERDICT_LEGEND,
    check_verdict,
    correlation_reading,
    effect_verdict,
    fraction_words,
    holm_levels,
    interval_label,
    level_text,
    p_text,
    paired_verdict,
    scaled_effect,
)

PAPER = -20.0  # the paper's effect in our tokens: A is 20 tokens better


@pytest.mark.parametrize("lo, hi, n, paper, expected", [
    (-30.0, -5.0, 200, PAPER, REPRODUCED),           # below 0, includes the paper's effect
    (-30.0, -1e-9, 200, PAPER, REPRODUCED),          # just below 0
    (-20.0, -5.0, 200, PAPER, REPRODUCED),           # reaches the paper's effect exactly: not ruled out
    (-19.999, -5.0, 200, PAPER, SIZE_RULED_OUT),     # just inside it: the size is ruled out
    (-13.7, -0.5, 200, -89.8, SIZE_RULED_OUT),       # EGTP < SSJF-Reg on the shipped study
    (-13.5, -0.6, 200, -27.9, SIZE_RULED_OUT),       # the PLP fall on the shipped study
    (-8.0, -1e-9, 200, PAPER, SIZE_RULED_OUT),       # just below 0, well inside the paper's effect
    (-30.0, -5.0, 200, None, REPRODUCED),            # the paper gives no number: nothing to rule out
    (-3.0, -1.0, 200, 5.0, REPRODUCED),              # a paper effect above 0 is no size to fall short of
    (-30.0, 0.0, 200, PAPER, INCONCLUSIVE),          # touches 0, includes the paper's effect
    (2.0, 9.0, 200, PAPER, CONTRADICTED),
    (1e-9, 9.0, 200, PAPER, CONTRADICTED),           # just above 0
    (-8.0, 6.0, 200, PAPER, RULED_OUT),              # includes 0, excludes -20
    (-19.999, 6.0, 200, PAPER, RULED_OUT),           # just inside the paper's effect
    (-20.0, 6.0, 200, PAPER, INCONCLUSIVE),          # reaches the paper's effect exactly
    (-25.0, 6.0, 200, PAPER, INCONCLUSIVE),
    (-8.0, 6.0, 200, None, INCONCLUSIVE),            # the paper gives no number
    (-3.0, 6.0, 200, 5.0, INCONCLUSIVE),             # a positive paper effect inside the CI
    (-3.0, 4.0, 200, 5.0, RULED_OUT),                # ... and outside it
    (-30.0, -5.0, MIN_PROMPTS, PAPER, REPRODUCED),   # 50 prompts: judged
    (-30.0, -5.0, MIN_PROMPTS - 1, PAPER, "too few prompts to judge (n = 49)"),
    (-8.0, 6.0, 14, PAPER, "too few prompts to judge (n = 14)"),
])
def test_effect_verdict_labels_and_boundaries(lo, hi, n, paper, expected):
    assert effect_verdict(lo, hi, n, paper) == expected


def test_labels_are_distinct_and_the_legend_names_every_one():
    assert LABELS == (REPRODUCED, SIZE_RULED_OUT, CONTRADICTED, RULED_OUT, INCONCLUSIVE)
    assert SIZE_RULED_OUT == "direction reproduced, size ruled out"
    assert len(set(LABELS + (CHECK_PASSED, CHECK_FAILED, CHECK_UNDECIDED))) == 8
    for label in (*LABELS, CHECK_PASSED, CHECK_FAILED, CHECK_UNDECIDED, "baseline check"):
        assert f"{label}" in VERDICT_LEGEND


@pytest.mark.parametrize("lo, hi, n, expected", [
    (-9.0, -1e-9, 200, CHECK_PASSED),
    (1e-9, 9.0, 200, CHECK_FAILED),
    (-9.0, 0.0, 200, CHECK_UNDECIDED),
    (0.0, 9.0, 200, CHECK_UNDECIDED),
    (34.9, 55.4, MIN_PROMPTS - 1, "too few prompts to judge (n = 49)"),
])
def test_a_baseline_check_never_says_reproduced_or_contradicted(lo, hi, n, expected):
    assert check_verdict(lo, hi, n) == expected
    assert check_verdict(lo, hi, n) not in LABELS


@pytest.mark.parametrize("level, family, text", [
    (0.95, None, "95% CI"),
    (None, None, "95% CI"),
    (float("nan"), 24, "95% CI"),                    # a row outside the family keeps its plain 95% CI
    (1 - 0.05 / 24, 24, "Holm-adjusted 99.8% CI (family of 24)"),
    (1 - 0.05 / 7, 24.0, "Holm-adjusted 99.3% CI (family of 24)"),
    (0.995, 22, "Holm-adjusted 99.5% CI (family of 22)"),
    (0.95, 1, "Holm-adjusted 95% CI (family of 1)"),
    (0.9999, 3, "Holm-adjusted 99.99% CI (family of 3)"),  # never rounded up to 100%
    (0.99, float("nan"), "99% CI"),
])
def test_interval_label_names_the_level_and_the_family(level, family, text):
    assert interval_label(level, family) == text


def test_level_text_keeps_the_decimals_it_needs():
    assert [level_text(v) for v in (0.95, 0.9929, 0.99964, 0.5)] == ["95%", "99.3%", "99.96%", "50%"]


@pytest.mark.parametrize("lo, hi, n, expected", [
    (-3.0, -1e-9, 200, "first better"),
    (1e-9, 3.0, 200, "second better"),
    (-3.0, 0.0, 200, "not distinguishable"),
    (-3.0, -1.0, MIN_PROMPTS - 1, "too few prompts to judge (n = 49)"),
])
def test_paired_verdict_reads_the_sign_and_the_number_of_prompts(lo, hi, n, expected):
    assert paired_verdict(lo, hi, n) == expected
    assert paired_verdict(lo, hi, n, ("a", "b", "c")) in {"a", "b", "c", expected}
    assert PAIRED_LABELS == ("first better", "second better", "not distinguishable")


def test_paper_effect_is_scaled_to_our_mae():
    assert scaled_effect(-0.135, 150.0) == pytest.approx(-20.25)
    assert scaled_effect(None, 150.0) is None


def test_holm_levels_step_down_and_stop():
    levels = holm_levels([0.001, 0.04, 0.012, np.nan, 0.3], alpha=0.05)
    # ranks: 0.001 (1 - 0.05/4), 0.012 (1 - 0.05/3), 0.04 > 0.05/2 stops: it and 0.3 keep 1 - 0.05/2
    assert levels[0] == pytest.approx(1 - 0.05 / 4)
    assert levels[2] == pytest.approx(1 - 0.05 / 3)
    assert levels[1] == pytest.approx(1 - 0.05 / 2) and levels[4] == pytest.approx(1 - 0.05 / 2)
    assert np.isnan(levels[3])
    assert holm_levels([0.01], 0.05)[0] == pytest.approx(0.95)


def _errors(rng, n_rows, seeds, seed_sd):
    base = rng.gamma(2.0, 50.0, n_rows)
    return np.stack([base + rng.normal(0, seed_sd) for _ in range(seeds)])


def test_seeded_bootstrap_carries_seed_spread_and_clusters():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(300), 2)  # two rows per conversation
    a_still = _errors(rng, 600, 5, 0.0)
    a_noisy = a_still + rng.normal(0, 20.0, (5, 1))  # the same rows, each training seed shifted
    b = _errors(rng, 600, 1, 0.0)
    still = seeded_bootstrap([(a_still, 1), (b, -1)], groups)
    noisy = seeded_bootstrap([(a_noisy, 1), (b, -1)], groups)
    width = lambda d: np.subtract(*d.ci()[::-1])  # noqa: E731
    assert width(noisy) > width(still) * 1.5  # seed-to-seed spread widens the CI
    assert still.n == 300 and still.value == pytest.approx(a_still.mean() - b.mean())
    one = seeded_bootstrap([(a_still[:1], 1)], groups)
    assert one.value == pytest.approx(a_still[0].mean()) and one.ci()[0] < one.value < one.ci()[1]
    shifted = seeded_bootstrap([(b + 10.0, 1), (b, -1)], groups)
    assert shifted.value == pytest.approx(10.0) and shifted.p_value() <= 2 / len(shifted.draws)
    assert 0.2 < seeded_bootstrap([(a_still[:1], 1), (a_still[:1], -1)], groups).p_value() <= 1.0
    with pytest.raises(ValueError, match="groups"):
        seeded_bootstrap([(b, 1)], groups[:10])


def test_seeded_bootstrap_draws_what_one_resample_at_a_time_draws():
    """The replicates equal a loop that resamples the clusters, then each term's seeds, one replicate at a time."""
    rng = np.random.default_rng(4)
    k, n_boot = 23, 700
    groups = np.sort(np.concatenate([np.arange(k), rng.integers(0, k, 67)]))  # cluster codes in first-seen order
    terms = [(rng.normal(size=(3, 90)), 1.0), (rng.normal(size=(2, 90)), -1.0)]
    draws, loop = [], np.random.default_rng(0)
    counts = np.bincount(groups, minlength=k)
    sums = [np.stack([np.bincount(groups, weights=row, minlength=k) for row in e]) for e, _ in terms]
    for start in range(0, n_boot, 500):
        b = min(500, n_boot - start)
        weights = np.stack([np.bincount(loop.integers(0, k, k), minlength=k) for _ in range(b)])
        stat = np.zeros(b)
        for (e, sign), cs in zip(terms, sums):
            picks = np.stack([np.bincount(loop.integers(0, len(e), len(e)), minlength=len(e)) for _ in range(b)])
            stat += sign * ((picks / len(e) @ cs) * weights).sum(1)
        draws.append(stat / (weights @ counts))
    np.testing.assert_allclose(seeded_bootstrap(terms, groups, n_boot).draws, np.concatenate(draws), rtol=1e-12)


@pytest.mark.parametrize("p, n_perm, text", [(1 / 201, 200, "p < 0.005"), (1 / 101, 100, "p < 0.01"),
                                             (1 / 1001, 1000, "p < 0.001"), (0.0312, 200, "p = 0.031")])
def test_p_text_says_below_the_smallest_p_the_permutations_can_give(p, n_perm, text):
    assert p_text(p, n_perm) == text


@pytest.mark.parametrize("ratio, words", [(0.073, "about a tenth"), (0.37, "about a third"), (0.5, "about half"),
                                          (0.81, "about two thirds"), (1.0, "about all"), (0.02, "under a twentieth"),
                                          (2.0, "2.0 times")])
def test_fraction_words(ratio, words):
    assert fraction_words(ratio) == words


@pytest.mark.parametrize("r, lo, hi, p, expected", [
    (0.033, 0.005, 0.069, 1 / 201, "weak but significant, about a tenth of the paper's 0.451 (which is ruled out)"),
    (0.168, 0.129, 0.214, 1 / 201, "weak but significant, about a third of the paper's 0.451 (which is ruled out)"),
    (0.42, 0.35, 0.50, 1 / 201, "moderate and significant, consistent with the paper's 0.451"),
    (0.62, 0.55, 0.70, 1 / 201, "strong and significant, above the paper's 0.451"),
    (0.01, -0.04, 0.06, 0.6, "no correlation detectable; the paper's 0.451 is ruled out"),
    (0.3, -0.1, 0.7, 0.2, "no correlation detectable; consistent with the paper's 0.451"),
    (-0.1, -0.15, -0.05, 1 / 201, "a significant anti-correlation, against the paper's sign"),
])
def test_a_correlation_is_read_by_its_p_value_and_its_size_against_the_papers(r, lo, hi, p, expected):
    text = correlation_reading(r, lo, hi, p, 200, 0.451)
    assert text == f"r = {r:.3f} [{lo:.3f}, {hi:.3f}], {p_text(p, 200)}: {expected}"
