"""The attribution evidence table (every importance measure x every control) and its one-line verdict.

Rows per measure (controls in :mod:`analysis.egtp.controls`; CIs are percentile bootstraps over runs):

* ``raw``: pooled Pearson / Spearman of entropy and importance over the tokens of all runs;
* ``run-normalised``: the same with importance divided by its run's mean, **the test**;
* ``per-run mean``: the mean over runs of the within-run correlation (CI of that mean);
* ``partial``: run-normalised, with position and log state norm partialled out of both variables;
* ``permutation null``: the run-normalised correlation with entropies shuffled within runs: ``pearson`` is the
  null's mean and ``lo``/``hi`` its central ``level`` interval.

Spearman is the Pearson r of the pooled ranks (partial: of the residualised ranks). A head that reads
entropy (EGTP pooling at its own layer) is marked ``by_construction``: its importance follows its entropy
weights, so its r is true by construction and the verdict ignores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

from analysis.core.metrics import Estimate, bootstrap_correlation, bootstrap_mean
from analysis.core.progress import Progress, no_progress
from analysis.core.soft_label_head import SoftLabelHead
from analysis.core.verdicts import too_few_prompts
from analysis.egtp.attention_head import AttentionPoolingHead
from analysis.egtp.controls import (
    RunTokens,
    content_tokens,
    normalise_within_run,
    per_run_correlations,
    permutation_null,
    residualise,
)
from analysis.egtp.importance import MEASURES, head_importances

PARTIAL = "partial (position, log norm)"
CONTROLS = ("raw", "run-normalised", "per-run mean", PARTIAL, "permutation null")
COLUMNS = ("head", "layer", "path", "by_construction", "measure", "control", "pearson", "pearson_lo", "pearson_hi",
           "spearman", "spearman_lo", "spearman_hi", "n_tokens", "n_runs")


@dataclass(frozen=True)
class RunArrays:
    """One run as the attribution reads it: ``hidden`` [T, d] at the head's layer and ``entropy`` [T] over the
    whole prompt, the first pooled token ``content_start``, the true output length, and (for display) the
    prompt's token strings."""

    run_id: int
    hidden: torch.Tensor
    entropy: torch.Tensor
    content_start: int
    true_length: float
    tokens: tuple[str, ...] = ()


def _row(measure: str, control: str, pearson: Estimate, spearman: Estimate, n_tokens: int) -> dict:
    return {"measure": measure, "control": control, "pearson": pearson.value, "pearson_lo": pearson.lo,
            "pearson_hi": pearson.hi, "spearman": spearman.value, "spearman_lo": spearman.lo,
            "spearman_hi": spearman.hi, "n_tokens": int(n_tokens), "n_runs": int(pearson.n)}


def _null_interval(values: np.ndarray, n_runs: int, level: float) -> Estimate:
    """The permutation distribution's mean and central ``level`` interval."""
    tail = (1 - level) / 2
    lo, hi = np.nanquantile(values, [tail, 1 - tail]) if np.isfinite(values).any() else (np.nan, np.nan)
    return Estimate(float(np.nanmean(values)) if np.isfinite(values).any() else np.nan, float(lo), float(hi), n_runs)


def _measure_rows(runs: Sequence[RunTokens], measure: str, n_boot: int = 1000, n_perm: int = 200,
                  level: float = 0.95, seed: int = 0) -> list[dict]:
    """The rows of :data:`CONTROLS` for one measure over ``runs``."""
    h = np.concatenate([r.entropy for r in runs])
    raw = np.concatenate([r.importance[measure] for r in runs])
    norm = np.concatenate([normalise_within_run(r.importance[measure]) for r in runs])
    groups = np.concatenate([np.full(len(r.entropy), r.run_id) for r in runs])
    covariates = np.column_stack([np.concatenate([r.position for r in runs]),
                                  np.concatenate([r.log_norm for r in runs])])
    ok = np.isfinite(norm)
    h_ok, n_ok, g_ok = h[ok], norm[ok], groups[ok]

    def pair(x: np.ndarray, y: np.ndarray, g: np.ndarray) -> tuple[Estimate, Estimate]:
        return (bootstrap_correlation(x, y, g, n_boot, level, seed),
                bootstrap_correlation(rankdata(x), rankdata(y), g, n_boot, level, seed))

    rows = [_row(measure, "raw", *pair(h, raw, groups), len(h))]
    if not ok.any():
        return rows
    rows.append(_row(measure, "run-normalised", *pair(h_ok, n_ok, g_ok), ok.sum()))
    ids, pearson, spearman = per_run_correlations(runs, measure)
    if len(ids):
        sizes = {r.run_id: len(r.entropy) for r in runs}
        rows.append(_row(measure, "per-run mean", bootstrap_mean(pearson, None, n_boot, level, seed),
                         bootstrap_mean(spearman, None, n_boot, level, seed), sum(sizes[i] for i in ids)))
    cov = covariates[ok]
    partial_p = bootstrap_correlation(residualise(h_ok, cov), residualise(n_ok, cov), g_ok, n_boot, level, seed)
    partial_s = bootstrap_correlation(residualise(rankdata(h_ok), cov), residualise(rankdata(n_ok), cov), g_ok,
                                      n_boot, level, seed)
    rows.append(_row(measure, PARTIAL, partial_p, partial_s, ok.sum()))
    null_p, null_s = permutation_null(h_ok, n_ok, g_ok, n_perm, seed)
    n_runs = len(np.unique(g_ok))
    rows.append(_row(measure, "permutation null", _null_interval(null_p, n_runs, level),
                     _null_interval(null_s, n_runs, level), ok.sum()))
    return rows


def evidence_table(runs: Sequence[RunTokens], *, head: str, layer: int | None, path: str,
                   by_construction: bool = False, n_boot: int = 1000, n_perm: int = 200, level: float = 0.95,
                   seed: int = 0) -> pd.DataFrame:
    """Measure x control rows (:data:`COLUMNS`) for every measure the runs carry, labelled with the head, the
    layer and the gradient path that produced the importances."""
    runs = [r for r in runs if len(r.entropy)]
    if not runs:
        raise ValueError("no tokens to correlate")
    measures = [m for m in MEASURES if m in runs[0].importance] + sorted(set(runs[0].importance) - set(MEASURES))
    frame = pd.DataFrame([row for m in measures for row in _measure_rows(runs, m, n_boot, n_perm, level, seed)])
    frame.insert(0, "head", head)
    frame.insert(1, "layer", layer)
    frame.insert(2, "path", path)
    frame.insert(3, "by_construction", by_construction)
    return frame[list(COLUMNS)]


def head_tokens(runs: Sequence[RunArrays], head: AttentionPoolingHead | SoftLabelHead, *, name: str,
                pooling: str = "mean", alpha: float = 1.0, ig_steps: int = 32,
                on_progress: Progress = no_progress) -> list[RunTokens]:
    """The pooled tokens of each run with every importance of ``head`` at its own input
    (:func:`analysis.egtp.importance.head_importances`)."""
    tokens = []
    for i, run in enumerate(runs):
        c = run.content_start
        imp = head_importances(head, run.hidden[c:], run.entropy[c:], run.true_length, pooling, alpha, ig_steps)
        tokens.append(content_tokens(run.run_id, run.hidden.float().numpy(), run.entropy.float().numpy(), c, imp))
        on_progress(i + 1, len(runs), f"attribution ({name})")
    return tokens


def head_evidence(runs: Sequence[RunArrays], head: AttentionPoolingHead | SoftLabelHead, *, name: str,
                  layer: int | None, pooling: str = "mean", alpha: float = 1.0, ig_steps: int = 32,
                  n_boot: int = 1000, n_perm: int = 200, level: float = 0.95, seed: int = 0,
                  on_progress: Progress = no_progress) -> tuple[pd.DataFrame, list[RunTokens]]:
    """:func:`evidence_table` of ``head`` at its own input (path ``head input``) and the per-token importances
    it was computed from (:func:`head_tokens`). A :class:`SoftLabelHead` with ``pooling="egtp"`` is flagged
    ``by_construction``."""
    tokens = head_tokens(runs, head, name=name, pooling=pooling, alpha=alpha, ig_steps=ig_steps,
                         on_progress=on_progress)
    egtp = isinstance(head, SoftLabelHead) and pooling == "egtp"
    table = evidence_table(tokens, head=name, layer=layer, path="head input", by_construction=egtp, n_boot=n_boot,
                           n_perm=n_perm, level=level, seed=seed)
    return table, tokens


def _ci(row: pd.Series) -> str:
    return f"r = {row.pearson:.3f} [{row.pearson_lo:.3f}, {row.pearson_hi:.3f}]"


def verdict(table: pd.DataFrame, paper_r: float = 0.451, head: str | None = None, measure: str = "gradient") -> str:
    """One line from the CIs of ``measure`` for ``head`` (default: the table's first head not true by
    construction): the run-normalised r against the permutation null's interval, then against ``paper_r``, and
    whether it survives partialling out position and activation norm."""
    rows = table[~table["by_construction"].astype(bool) & (table["measure"] == measure)]
    if rows.empty:
        raise ValueError(f"no rows for measure {measure!r} outside the by-construction heads")
    head = rows["head"].iloc[0] if head is None else head
    rows = rows[rows["head"] == head].set_index("control")
    label = f"{head} head, {measure} importance"
    if "run-normalised" not in rows.index or not np.isfinite(rows.loc["run-normalised", "pearson"]):
        return f"{label}: not testable (importance does not vary within runs)"
    obs, null = rows.loc["run-normalised"], rows.loc["permutation null"]
    few = too_few_prompts(int(obs.n_runs))
    if few:
        return f"{label}: {few} ({_ci(obs)}; the paper reports {paper_r:.3f})"
    against = f"{_ci(obs)}; permutation null [{null.pearson_lo:.3f}, {null.pearson_hi:.3f}]"
    if obs.pearson_lo > null.pearson_hi:
        rel = "below" if obs.pearson_hi < paper_r else "above" if obs.pearson_lo > paper_r else "consistent with"
        text = f"{label}: entropy and importance correlate ({against}), {rel} the paper's {paper_r:.3f}"
        part = rows.loc[PARTIAL]
        if part.pearson_lo <= 0 <= part.pearson_hi:
            text += f", but not beyond position and activation norm (partial {_ci(part)})"
        return text
    if obs.pearson_hi < null.pearson_lo:
        return f"{label}: entropy and importance anti-correlate ({against}), against the paper's {paper_r:.3f}"
    return f"{label}: no correlation beyond the permutation null ({against}); the paper reports {paper_r:.3f}"
