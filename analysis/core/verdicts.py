"""Verdicts that read the effect size: a claim's paired MAE difference against 0 and against the paper's effect.

A claim says ``A < B`` (a negative MAE difference A - B means it holds). Its CI (Holm-adjusted over the family
of claims judged together) gives one of:

* **reproduced**: the whole CI is below 0;
* **contradicted**: the whole CI is above 0;
* **paper's effect ruled out**: the CI includes 0 but excludes the paper's effect, scaled to our MAE (the paper's
  relative MAE change times our MAE of B): whatever the sign here, an effect as large as the paper's is not;
* **inconclusive**: the CI includes both 0 and the paper's effect (or the paper gives no number);
* **too few prompts to judge (n = N)**: under :data:`MIN_PROMPTS` distinct test prompts, no verdict at all.

Holm's step-down correction: claims are ranked by their bootstrap p-values; the claim of rank i (from 0) of m
is judged on a CI of level ``1 - alpha / (m - i)`` while every better-ranked claim was rejected, and every claim
from the first non-rejected one on keeps that claim's level, so an adjusted CI excludes 0 exactly when Holm
rejects.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_PROMPTS = 50
REPRODUCED, CONTRADICTED, RULED_OUT, INCONCLUSIVE = ("reproduced", "contradicted", "paper's effect ruled out",
                                                     "inconclusive")
LABELS = (REPRODUCED, CONTRADICTED, RULED_OUT, INCONCLUSIVE)


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
    if hi < 0:
        return REPRODUCED
    if lo > 0:
        return CONTRADICTED
    if paper_effect is not None and (lo > paper_effect if paper_effect < 0 else hi < paper_effect):
        return RULED_OUT
    return INCONCLUSIVE


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
