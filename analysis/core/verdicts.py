"""Verdicts that read the effect size: a claim's paired MAE difference against 0 and against the paper's effect.

A claim says ``A < B`` (a negative MAE difference A - B means it holds). The paper's effect is its relative MAE
change scaled to our MAE (times our MAE of B). The claim's CI (Holm-adjusted over the family of claims judged
together) gives one of:

* **reproduced**: the whole CI is below 0 and its lower end reaches the paper's effect (at or below it: an effect
  as large as the paper's is not ruled out), or the paper gives no effect below 0;
* **direction reproduced, size ruled out**: the whole CI is below 0 and its lower end is above the paper's effect
  (below 0): A is better, by less than the paper says;
* **contradicted**: the whole CI is above 0;
* **paper's effect ruled out**: the CI includes 0 but excludes the paper's effect: whatever the sign here, an
  effect as large as the paper's is not;
* **inconclusive**: the CI includes both 0 and the paper's effect (or the paper gives no number);
* **too few prompts to judge (n = N)**: under :data:`MIN_PROMPTS` distinct test prompts, no verdict at all.

A **baseline check** (:data:`BASELINE_CHECK`) is a row no paper claims: a baseline against the median constant,
a sanity check of the baseline's implementation. Its CI gives **check passed: below the constant** (the whole CI
below 0), **check failed: above the constant** (the whole CI above 0) or **not distinguishable from the constant**
(the CI includes 0), or too few prompts to judge; never "reproduced" or "contradicted".

Holm's step-down correction: claims are ranked by their bootstrap p-values; the claim of rank i (from 0) of m
is judged on a CI of level ``1 - alpha / (m - i)`` while every better-ranked claim was rejected, and every claim
from the first non-rejected one on keeps that claim's level, so an adjusted CI excludes 0 exactly when Holm
rejects. :func:`interval_label` names an interval's level wherever it is shown: ``Holm-adjusted 99.8% CI (family
of 24)`` or ``95% CI``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_PROMPTS = 50
REPRODUCED, SIZE_RULED_OUT, CONTRADICTED, RULED_OUT, INCONCLUSIVE = (
    "reproduced", "direction reproduced, size ruled out", "contradicted", "paper's effect ruled out", "inconclusive")
LABELS = (REPRODUCED, SIZE_RULED_OUT, CONTRADICTED, RULED_OUT, INCONCLUSIVE)
BASELINE_CHECK = "baseline check"  # the ``paper`` of a row no paper claims
CHECK_PASSED, CHECK_FAILED, CHECK_UNDECIDED = ("check passed: below the constant", "check failed: above the constant",
                                               "not distinguishable from the constant")
CHECK_LABELS = (CHECK_PASSED, CHECK_FAILED, CHECK_UNDECIDED)
VERDICT_MEANINGS = (  # label -> when it is given (the one statement of each label, for the pages and the docs)
    (REPRODUCED, "the whole CI is below 0 and includes the paper's effect (or the paper gives no number)"),
    (SIZE_RULED_OUT, "the whole CI is below 0 but excludes the paper's effect: the same direction, smaller than the "
                     "paper's"),
    (CONTRADICTED, "the whole CI is above 0"),
    (RULED_OUT, "the CI includes 0 but not the paper's effect"),
    (INCONCLUSIVE, "the CI includes both 0 and the paper's effect"),
    (CHECK_PASSED, f"a {BASELINE_CHECK} (a baseline against the constant, claimed by no paper): the whole CI is below "
                   "0"),
    (CHECK_FAILED, f"a {BASELINE_CHECK}: the whole CI is above 0"),
    (CHECK_UNDECIDED, f"a {BASELINE_CHECK}: the CI includes 0"),
    ("too few prompts to judge (n = N)", f"under {MIN_PROMPTS} distinct prompts: no verdict"),
)
VERDICT_LEGEND = "; ".join(f"{label}: {meaning}" for label, meaning in VERDICT_MEANINGS)


def too_few_prompts(n: int, minimum: int = MIN_PROMPTS) -> str | None:
    """``too few prompts to judge (n = N)`` under ``minimum`` prompts, else None."""
    return f"too few prompts to judge (n = {n})" if n < minimum else None


PAIRED_LABELS = ("first better", "second better", "not distinguishable")


def paired_verdict(lo: float, hi: float, n_prompts: int, labels: Sequence[str] = PAIRED_LABELS,
                   minimum: int = MIN_PROMPTS) -> str:
    """A paired difference's plain reading, no paper effect to weigh: ``labels`` = (whole CI under 0, whole CI
    over 0, neither), or too few prompts to judge under ``minimum`` prompts."""
    below, above, neither = labels
    return too_few_prompts(n_prompts, minimum) or (below if hi < 0 else above if lo > 0 else neither)


def effect_verdict(lo: float, hi: float, n_prompts: int, paper_effect: float | None = None,
                   minimum: int = MIN_PROMPTS) -> str:
    """The label of a claim ``A < B`` from the CI [lo, hi] of MAE(A) - MAE(B) over ``n_prompts`` prompts and the
    paper's effect in the same units (negative: the paper found A better), as in the module docstring."""
    few = too_few_prompts(n_prompts, minimum)
    if few:
        return few
    excludes_paper = paper_effect is not None and (lo > paper_effect if paper_effect < 0 else hi < paper_effect)
    if hi < 0:
        return SIZE_RULED_OUT if excludes_paper and paper_effect < 0 else REPRODUCED
    if lo > 0:
        return CONTRADICTED
    return RULED_OUT if excludes_paper else INCONCLUSIVE


def check_verdict(lo: float, hi: float, n_prompts: int, minimum: int = MIN_PROMPTS) -> str:
    """The label of a baseline check ``baseline < constant`` (:data:`CHECK_LABELS`, or too few prompts to judge)."""
    return paired_verdict(lo, hi, n_prompts, CHECK_LABELS, minimum)


def level_text(level: float) -> str:
    """A CI level as a percentage with the decimals it needs: ``95%``, ``99.3%``, ``99.99%``."""
    digits = 1
    while digits < 4 and round(level * 100, digits) >= 100:
        digits += 1
    return f"{level * 100:.{digits}f}".rstrip("0").rstrip(".") + "%"


def interval_label(level: float | None = 0.95, family: float | None = None) -> str:
    """What an interval is: ``Holm-adjusted 99.8% CI (family of 24)`` for a Holm level within a family of
    ``family`` judged rows, ``95% CI`` without a family (``99% CI`` for another level) or without a level (a row
    outside the family keeps its plain 95% CI)."""
    if level is None or not np.isfinite(level):
        return "95% CI"
    if family is None or not np.isfinite(family) or family < 1:
        return f"{level_text(level)} CI"
    return f"Holm-adjusted {level_text(level)} CI (family of {int(family)})"


def scaled_effect(relative: float | None, reference_mae: float) -> float | None:
    """The paper's relative MAE change (e.g. -0.135) in our tokens: times our MAE of the reference predictor."""
    return None if relative is None else relative * reference_mae


def holm_levels(p_values: Sequence[float], alpha: float = 0.05) -> np.ndarray:
    """The CI level of each claim under Holm's step-down correction (see the module docstring); NaN p-values
    (claims not judged) get NaN and do not count in the family."""
    p = np.asarray(p_values, dtype=float)
    levels = np.full(p.shape, np.nan)
    judged = np.flatnonzero(np.isfinite(p))
    m = len(judged)
    stopped = None
    for rank, i in enumerate(judged[np.argsort(p[judged], kind="stable")]):
        threshold = alpha / (m - rank)
        if stopped is None and p[i] > threshold:
            stopped = threshold
        levels[i] = 1 - (threshold if stopped is None else stopped)
    return levels


SIGNIFICANCE = 0.05
# Fractions a correlation is said to be of the paper's, in words (the nearest on a log scale).
FRACTIONS = ((1 / 20, "a twentieth"), (1 / 10, "a tenth"), (1 / 5, "a fifth"), (1 / 4, "a quarter"),
             (1 / 3, "a third"), (1 / 2, "half"), (2 / 3, "two thirds"), (1.0, "all"))


def p_text(p: float, n_perm: int) -> str:
    """``p < 0.005`` when no permutation reached the observed value (the smallest p ``n_perm`` draws can give,
    rounded up to one significant digit), else ``p = 0.031``."""
    floor = 1 / (n_perm + 1)
    if p <= floor * (1 + 1e-9):
        digits = max(0, -int(np.floor(np.log10(floor))))
        return f"p < {np.ceil(floor * 10 ** digits) / 10 ** digits:g}"
    return f"p = {p:.2g}"


def fraction_words(ratio: float) -> str:
    """``about a tenth`` of a positive ``ratio`` up to about 1.2; ``N times`` above; ``under a twentieth`` below."""
    if ratio < FRACTIONS[0][0] / 1.5:
        return "under a twentieth"
    if ratio > 1.2:
        return f"{ratio:.1f} times"
    return "about " + min(FRACTIONS, key=lambda f: abs(np.log(ratio / f[0])))[1]


def correlation_reading(r: float, lo: float, hi: float, p: float, n_perm: int, paper_r: float) -> str:
    """A correlation read by significance and size, in words: ``r = 0.033 [0.005, 0.069], p < 0.005: weak but
    significant, about a tenth of the paper's 0.451 (which is ruled out)``. Strength: under 0.3 weak, under 0.5
    moderate, else strong; the paper's r is ruled out when the CI's upper end is below it."""
    head = f"r = {r:.3f} [{lo:.3f}, {hi:.3f}], {p_text(p, n_perm)}"
    ruled_out = hi < paper_r
    paper = (f"the paper's {paper_r:.3f} is ruled out" if ruled_out else
             f"above the paper's {paper_r:.3f}" if lo > paper_r else f"consistent with the paper's {paper_r:.3f}")
    if not p < SIGNIFICANCE:
        return f"{head}: no correlation detectable; {paper}"
    if r < 0:
        return f"{head}: a significant anti-correlation, against the paper's sign"
    strength = "weak but significant" if r < 0.3 else "moderate and significant" if r < 0.5 else \
        "strong and significant"
    size = f"{fraction_words(r / paper_r)} of the paper's {paper_r:.3f} (which is ruled out)" if ruled_out else paper
    return f"{head}: {strength}, {size}"
