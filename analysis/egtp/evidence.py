"""The attribution evidence table (every importance measure x every control) and its one-line verdict.

Rows per measure (controls in :mod:`lenscope.analysis.egtp.controls`; CIs are percentile bootstraps over runs):

* ``raw``: pooled Pearson / Spearman of entropy and importance over the tokens of all runs, **like for like**
  with the paper's r (most likely pooled over all tokens the same way);
* ``run-normalised``: the same with importance divided by its run's mean, **the within-run test**;
* ``per-run mean``: the mean over runs of the within-run correlation (CI of that mean);
* ``partial``: run-normalised, with position and log state norm partialled out of both variables;
* ``permutation null``: the run-normalised correlation with entropies shuffled within runs: ``pearson`` is the
  null's mean and ``lo``/``hi`` its central ``level`` interval.

``p_value`` (raw and run-normalised rows): the two-sided permutation p-value of the row's Pearson r against
the same ``n_perm`` within-run shuffles (:func:`lenscope.analysis.egtp.controls.permutation_p`). Spearman is the Pearson
r of the pooled ranks (partial: of the residualised ranks).

A head that reads entropy (EGTP pooling at its own layer) is marked ``by_construction``: its importance follows
its entropy weights, so it is the **positive control** (:func:`positive_control`): the same pipeline must find
its correlation, or a null result of the learned heads means nothing. The verdict never reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

from lenscope.analysis.core.metrics import Estimate, bootstrap_correlation, bootstrap_mean
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.soft_label_head import SoftLabelHead
from lenscope.analysis.core.verdicts import SIGNIFICANCE, correlation_reading, p_text, too_few_prompts
from lenscope.analysis.egtp.attention_head import AttentionPoolingHead, pad_runs
from lenscope.analysis.egtp.controls import (
    RunTokens,
    content_tokens,
    normalise_within_run,
    per_run_correlations,
    permutation_null,
    permutation_p,
    residualise,
)
from lenscope.analysis.egtp.importance import MEASURES, head_importances
from lenscope.analysis.egtp.pooling import entropy_weights, pool
from lenscope.analysis.papers import EGTP_ATTRIBUTION_R

PARTIAL = "partial (position, log norm)"
CONTROLS = ("raw", "run-normalised", "per-run mean", PARTIAL, "permutation null")
COLUMNS = ("head", "layer", "path", "by_construction", "measure", "control", "pearson", "pearson_lo", "pearson_hi",
           "p_value", "n_perm", "spearman", "spearman_lo", "spearman_hi", "n_tokens", "n_runs")


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


def _row(measure: str, control: str, pearson: Estimate, spearman: Estimate, n_tokens: int,
         p_value: float = np.nan, n_perm: int = 0) -> dict:
    return {"measure": measure, "control": control, "pearson": pearson.value, "pearson_lo": pearson.lo,
            "pearson_hi": pearson.hi, "p_value": p_value, "n_perm": n_perm, "spearman": spearman.value,
            "spearman_lo": spearman.lo, "spearman_hi": spearman.hi, "n_tokens": int(n_tokens), "n_runs": int(pearson.n)}


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

    raw_p, raw_s = pair(h, raw, groups)
    rows = [_row(measure, "raw", raw_p, raw_s, len(h), permutation_p(raw_p.value, permutation_null(
        h, raw, groups, n_perm, seed)[0]), n_perm)]
    if not ok.any():
        return rows
    null_p, null_s = permutation_null(h_ok, n_ok, g_ok, n_perm, seed)
    within_p, within_s = pair(h_ok, n_ok, g_ok)
    rows.append(_row(measure, "run-normalised", within_p, within_s, ok.sum(), permutation_p(within_p.value, null_p),
                     n_perm))
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
    (:func:`lenscope.analysis.egtp.importance.head_importances`)."""
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


def _reading(row: pd.Series, paper_r: float) -> str:
    return correlation_reading(row.pearson, row.pearson_lo, row.pearson_hi, row.p_value, int(row.n_perm), paper_r)


def _head_rows(table: pd.DataFrame, head: str, measure: str) -> pd.DataFrame:
    return table[(table["head"] == head) & (table["measure"] == measure)].set_index("control")


def verdict(table: pd.DataFrame, paper_r: float = EGTP_ATTRIBUTION_R, head: str | None = None,
            measure: str = "gradient") -> str:
    """One line for ``measure`` of ``head`` (default: the table's first head not true by construction): the raw r
    (like for like with the paper's), then the run-normalised r (the within-run test), each read by its
    permutation p-value and its size against ``paper_r``
    (:func:`lenscope.analysis.core.verdicts.correlation_reading`), and whether the within-run correlation survives
    partialling out position and activation norm; under 50 test prompts: too few to judge."""
    tested = table[~table["by_construction"].astype(bool) & (table["measure"] == measure)]
    if tested.empty:
        raise ValueError(f"no rows for measure {measure!r} outside the by-construction heads")
    head = tested["head"].iloc[0] if head is None else head
    rows = _head_rows(tested, head, measure)
    label = f"{head} head, {measure} importance"
    if "run-normalised" not in rows.index or not np.isfinite(rows.loc["run-normalised", "pearson"]):
        return f"{label}: not testable (importance does not vary within runs)"
    raw, within = rows.loc["raw"], rows.loc["run-normalised"]
    few = too_few_prompts(int(within.n_runs))
    if few:
        return f"{label}: {few} (raw {_ci(raw)}, within runs {_ci(within)}; the paper reports {paper_r:.3f})"
    text = f"{label}: raw {_reading(raw, paper_r)}; within runs {_reading(within, paper_r)}"
    part = rows.loc[PARTIAL]
    if within.p_value < SIGNIFICANCE and part.pearson_lo <= 0 <= part.pearson_hi:
        text += f"; not beyond position and activation norm (partial {_ci(part)})"
    return text


def positive_control(table: pd.DataFrame, measure: str = "gradient") -> str | None:
    """Whether the pipeline finds the correlation built into the by-construction head (it pools by entropy): its
    within-run r and permutation p-value, and what that means for a null result; None without such a head."""
    heads = table.loc[table["by_construction"].astype(bool) & (table["measure"] == measure), "head"]
    if heads.empty:
        return None
    rows = _head_rows(table, heads.iloc[0], measure)
    label = f"positive control ({heads.iloc[0]} head, pools by entropy; {measure} importance)"
    if "run-normalised" not in rows.index or not np.isfinite(rows.loc["run-normalised", "pearson"]):
        return f"{label}: not testable (importance does not vary within runs)"
    within = rows.loc["run-normalised"]
    few = too_few_prompts(int(within.n_runs))
    if few:
        return f"{label}: {few} (within runs {_ci(within)})"
    found = within.p_value < SIGNIFICANCE and within.pearson > 0
    return (f"{label}: within runs {_ci(within)}, {p_text(within.p_value, int(within.n_perm))}: "
            + ("the pipeline finds a correlation where one is built in, so a null result of a learned head is "
               "evidence" if found else
               "the pipeline misses even a built-in correlation, so no result of a learned head can be read"))


def head_predictions(head: AttentionPoolingHead | SoftLabelHead, runs: Sequence[RunArrays], pooling: str = "mean",
                     alpha: float = 1.0) -> np.ndarray:
    """Predicted lengths [N] of each run from its pooled tokens (a static head pools them by ``pooling``)."""
    head.eval()
    with torch.no_grad():
        if isinstance(head, AttentionPoolingHead):
            return np.array([float(head.predict(*pad_runs([r.hidden[r.content_start:].float()]))[0]) for r in runs])
        dtype = next(head.parameters()).dtype
        x = torch.stack([pool(r.hidden[r.content_start:].to(dtype), r.entropy[r.content_start:], pooling, alpha)
                         for r in runs])
        return head.predict(x).float().numpy()


def weight_entropy(head: AttentionPoolingHead | SoftLabelHead, run: RunArrays, pooling: str = "mean",
                   alpha: float = 1.0) -> float:
    """Normalised entropy ``H(a) / log T`` of the pooling weights over one run's T pooled tokens: 1 = uniform
    (mean pooling), 0 = one token; NaN for a one-token run or a pooling without weights (max, last)."""
    c = run.content_start
    if isinstance(head, AttentionPoolingHead):
        with torch.no_grad():
            a = head.weights(run.hidden[None, c:].float())[0]
    elif pooling == "egtp":
        a = entropy_weights(run.entropy[c:], alpha)
    elif pooling == "mean":
        a = torch.full((len(run.entropy) - c,), 1.0 / (len(run.entropy) - c))
    else:
        return float("nan")
    if len(a) < 2:
        return float("nan")
    return float(-(a * torch.log(a.clamp_min(1e-30))).sum() / np.log(len(a)))


def head_summaries(heads: dict[str, tuple[AttentionPoolingHead | SoftLabelHead, str, float]],
                   runs: Sequence[RunArrays], reference: str, n_boot: int = 1000, level: float = 0.95,
                   seed: int = 0) -> list[dict]:
    """Per head (name -> (head, pooling, alpha)): test ``mae`` over ``runs``, its paired difference from the
    ``reference`` head's (``vs_reference``) and the mean normalised entropy of its pooling weights, each with a
    bootstrap CI over runs (:func:`weight_entropy`)."""
    y = np.array([r.true_length for r in runs])
    errors = {name: np.abs(head_predictions(h, runs, p, a) - y) for name, (h, p, a) in heads.items()}
    out = []
    for name, (h, p, a) in heads.items():
        entropies = np.array([weight_entropy(h, r, p, a) for r in runs])
        ok = np.isfinite(entropies)
        out.append({"head": name, "n_runs": len(runs),
                    "mae": asdict(bootstrap_mean(errors[name], None, n_boot, level, seed)),
                    "vs_reference": asdict(bootstrap_mean(errors[name] - errors[reference], None, n_boot, level,
                                                          seed)),
                    "weight_entropy": (asdict(bootstrap_mean(entropies[ok], None, n_boot, level, seed))
                                       if ok.any() else None)})
    return out
