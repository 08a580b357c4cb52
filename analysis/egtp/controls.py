"""Controls of the entropy-importance test: which tokens count, how importance is made comparable across
runs, what is partialled out, and the permutation null.

* **Exclusion.** Only the pooled tokens count: positions ``content_start..T`` of the prompt (the user's
  content and the assistant header); the chat template's fixed system turn before ``content_start`` is dropped
  (:func:`content_tokens`).
* **Normalisation within a run.** ``I'_t = I_t / mean_run(I)`` (= ``T * I_t / sum_run I``): relative
  importance, mean 1 in every run, so neither a run's error ``y_hat - y`` (which scales all its gradients) nor
  its token count sets the level of its tokens in the pooled correlation (:func:`normalise_within_run`). A run
  whose importance is flat (within float32 rounding) says nothing about which token matters and is left out.
* **Per-run correlation.** Pearson / Spearman of entropy and importance inside each run (runs with at least
  3 tokens and both variables varying; unchanged by the normalisation), averaged over runs
  (:func:`per_run_correlations`).
* **Partial correlation.** Entropy and normalised importance are each residualised by least squares on
  ``[1, position, log ||h_t||_2]`` over the pooled tokens, and the residuals correlated (:func:`residualise`);
  ``position`` is the token's index in the prompt.
* **Permutation null.** Entropies shuffled within each run (each run keeps its entropies, their link to the
  tokens is broken), the pooled correlation recomputed per shuffle (:func:`permutation_null`). An association
  of run means survives a shuffle, so the null is centred at 0 only for run-normalised importance (mean 1 in
  every run). A row's permutation p-value (:func:`permutation_p`) is two-sided around the null's mean, so for raw
  importance it asks whether the token-level pairing adds to what the run means already give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from lenscope.analysis.core.metrics import varies


@dataclass(frozen=True)
class RunTokens:
    """The pooled tokens of one run: entropy, importance per measure, position in the prompt, log state norm."""

    run_id: int
    entropy: np.ndarray
    importance: dict[str, np.ndarray]
    position: np.ndarray
    log_norm: np.ndarray


def content_tokens(run_id: int, hidden: np.ndarray, entropy: np.ndarray, content_start: int,
                   importance: dict[str, np.ndarray]) -> RunTokens:
    """The pooled tokens ``content_start..T`` of a prompt: ``hidden`` [T, d] and ``entropy`` [T] cover the whole
    prompt and are cut there; each importance [T - content_start] covers those tokens only (the heads read
    nothing else). Adds each token's position and ``log ||h_t||_2``."""
    hidden, entropy = np.asarray(hidden, dtype=float), np.asarray(entropy, dtype=float)
    t, c = len(entropy), content_start
    if hidden.shape[0] != t:
        raise ValueError(f"hidden has {hidden.shape[0]} tokens, entropy {t}")
    if not 0 <= c < t:
        raise ValueError(f"content_start {c} is outside 0..{t - 1}")
    if any(len(v) != t - c for v in importance.values()):
        raise ValueError(f"each importance must cover the {t - c} tokens from content_start {c}")
    norm = np.linalg.norm(hidden[c:], axis=-1)
    return RunTokens(int(run_id), entropy[c:], {k: np.asarray(v, dtype=float) for k, v in importance.items()},
                     np.arange(c, t, dtype=float), np.log(np.maximum(norm, 1e-12)))


# Importances are computed in float32: a spread below this share of their magnitude is rounding, not signal.
FLOAT32_NOISE = 1e-5


def normalise_within_run(importance: np.ndarray) -> np.ndarray:
    """``I_t / mean(I)`` over one run's tokens; NaN everywhere when the mean is 0 or the importances do not
    vary beyond float32 rounding (e.g. a mean-pooling head at its own layer: the run says nothing about which
    token matters)."""
    x = np.asarray(importance, dtype=float)
    m = x.mean()
    return x / m if m != 0 and varies(x, FLOAT32_NOISE) else np.full_like(x, np.nan)


def residualise(y: np.ndarray, covariates: np.ndarray) -> np.ndarray:
    """``y`` minus its least-squares fit on ``[1, covariates]`` (covariates [N, k])."""
    design = np.column_stack([np.ones(len(y)), covariates])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    return y - design @ beta


def _r(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and varies(x) and varies(y) else float("nan")


def per_run_correlations(runs: Sequence[RunTokens], measure: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(run ids, Pearson [R], Spearman [R]) of entropy and ``measure`` within each run, for the runs where both
    are defined."""
    rows = [(r.run_id, _r(r.entropy, r.importance[measure]),
             _r(rankdata(r.entropy), rankdata(r.importance[measure]))) for r in runs]
    rows = [row for row in rows if np.isfinite(row[1]) and np.isfinite(row[2])]
    ids, pearson, spearman = (np.array(c, dtype=float) for c in zip(*rows)) if rows else (np.empty(0),) * 3
    return ids, pearson, spearman


def _pooled_r(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson r as the mean product of centred arrays over their standard deviations."""
    if not (varies(x) and varies(y)):
        return float("nan")
    return float(((x - x.mean()) * (y - y.mean())).mean() / (x.std() * y.std()))


def permutation_null(entropy: np.ndarray, importance: np.ndarray, groups: np.ndarray, n_perm: int = 200,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pooled (Pearson [n_perm], Spearman [n_perm]) of ``importance`` with ``entropy`` shuffled among the tokens of
    each group (``groups`` [N]: each token's run). Pooled ranks move with the values, so Spearman shuffles the
    pooled ranks of entropy."""
    entropy, importance, groups = (np.asarray(a) for a in (entropy, importance, groups))
    rng = np.random.default_rng(seed)
    ranks_h, ranks_i = rankdata(entropy), rankdata(importance)
    by_group = np.argsort(groups, kind="stable")
    order = np.empty(len(groups), dtype=int)
    pearson, spearman = np.empty(n_perm), np.empty(n_perm)
    for k in range(n_perm):
        order[by_group] = np.lexsort((rng.random(len(groups)), groups))
        pearson[k] = _pooled_r(entropy[order], importance)
        spearman[k] = _pooled_r(ranks_h[order], ranks_i)
    return pearson, spearman


def permutation_p(observed: float, null: np.ndarray) -> float:
    """Two-sided permutation p-value of ``observed`` against ``null`` draws, around the null's mean:
    ``(1 + #{|null - m| >= |observed - m|}) / (1 + n)``, so never below ``1 / (1 + n)``; NaN if undefined."""
    null = np.asarray(null, dtype=float)
    null = null[np.isfinite(null)]
    if not np.isfinite(observed) or not len(null):
        return float("nan")
    centre = null.mean()
    return float((1 + np.sum(np.abs(null - centre) >= abs(observed - centre) - 1e-12)) / (1 + len(null)))
