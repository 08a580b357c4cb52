"""Error metrics of length predictors, with bootstrap confidence intervals over prompts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lenscope.analysis.core.splits import evaluation_split


def mae(predicted, true) -> float:
    """Mean absolute error."""
    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    if p.shape != t.shape or p.size == 0:
        raise ValueError(f"need equal, non-empty shapes, got {p.shape} and {t.shape}")
    return float(np.abs(p - t).mean())


def clipped_errors(predicted, true, censored, cap) -> np.ndarray:
    """Per-row absolute error that credits censored rows (the answer hit the token cap, true length >= cap).

    A finished row scores ``|pred - true|``; a censored row scores ``max(0, cap - min(pred, cap))``, so a
    prediction at or above the cap is right. ``cap`` is a scalar or one value per row.
    """
    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    c = np.asarray(censored, dtype=bool)
    if p.shape != t.shape or c.shape != t.shape or p.size == 0:
        raise ValueError(f"need equal, non-empty shapes, got {p.shape}, {t.shape} and {c.shape} (censored)")
    limit = np.asarray(cap, dtype=float)
    if limit.ndim and limit.shape != t.shape:
        raise ValueError(f"cap must be a scalar or one value per row, got shape {limit.shape} for {t.shape}")
    limit = np.broadcast_to(limit, t.shape)
    return np.where(c, np.maximum(0.0, limit - np.minimum(p, limit)), np.abs(p - t))


def clipped_mae(predicted, true, censored, cap) -> float:
    """Mean of :func:`clipped_errors`: the MAE over finished and censored rows alike."""
    return float(clipped_errors(predicted, true, censored, cap).mean())


def mae_by_step(frame: pd.DataFrame, max_step: int | None = None) -> pd.DataFrame:
    """MAE of remaining-length predictions per decoding step (columns step, mae, n).

    ``frame`` has one row per (run, step) with columns step, predicted, true.
    """
    data = frame if max_step is None else frame[frame["step"] <= max_step]
    err = (data["predicted"] - data["true"]).abs()
    out = err.groupby(data["step"]).agg(["mean", "size"]).reset_index()
    return out.rename(columns={"mean": "mae", "size": "n"})


def bounds_text(lo: float, hi: float, fmt: str = ".1f") -> str:
    """An interval's bounds ``[lo, hi]`` in the format ``fmt`` (``+.1f``, ``.3f``, ``+.1%``)."""
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def ci_text(value: float, lo: float, hi: float, signed: bool = False, digits: int = 1) -> str:
    """``value [lo, hi]`` to ``digits`` decimals (with signs for differences)."""
    fmt = f"{'+' if signed else ''}.{digits}f"
    return f"{value:{fmt}} {bounds_text(lo, hi, fmt)}"


def estimate_text(est: Mapping | None, signed: bool = False, digits: int = 2, missing: str = "") -> str:
    """:func:`ci_text` of a stored estimate (a mapping with ``value``, ``lo`` and ``hi``); ``missing`` when it is
    missing or undefined."""
    if not est or est.get("value") is None or est.get("lo") is None:
        return missing
    return ci_text(est["value"], est["lo"], est["hi"], signed, digits)


@dataclass(frozen=True)
class Estimate:
    """A statistic with its bootstrap confidence interval and the number of units resampled (prompts)."""

    value: float
    lo: float
    hi: float
    n: int

    def __str__(self) -> str:
        return ci_text(self.value, self.lo, self.hi)

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def _cluster_sums(values: np.ndarray, groups) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of ``values`` and counts (each row its own cluster when ``groups`` is None)."""
    if groups is None:
        return values, np.ones_like(values)
    codes, _ = pd.factorize(pd.Series(groups), sort=False)
    sums = np.bincount(codes, weights=values)
    return sums, np.bincount(codes).astype(float)


def _bootstrap(sums: np.ndarray, counts: np.ndarray, n_boot: int, level: float, seed: int) -> Estimate:
    if sums.size == 0:
        raise ValueError("need at least one prediction")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, sums.size, size=(n_boot, sums.size))
    stats = sums[picks].sum(1) / counts[picks].sum(1)
    tail = (1 - level) / 2
    return Estimate(float(sums.sum() / counts.sum()), float(np.quantile(stats, tail)),
                    float(np.quantile(stats, 1 - tail)), int(sums.size))


def bootstrap_mean(values, groups=None, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> Estimate:
    """Mean of ``values`` with a percentile bootstrap CI over ``groups`` (the rows of one group are resampled
    together), or over rows when ``groups`` is None."""
    return _bootstrap(*_cluster_sums(np.asarray(values, dtype=float), groups), n_boot, level, seed)


def pooled_spread(values, groups) -> tuple[float, int]:
    """The within-group standard deviation of ``values`` pooled over every group (as in a one-way ANOVA) and its
    degrees of freedom: (NaN, 0) when no group has two values."""
    frame = pd.DataFrame({"group": list(groups), "value": np.asarray(values, dtype=float)})
    if frame.empty:
        raise ValueError("need at least one value")
    by = frame.groupby("group", sort=False)["value"]
    df = int((by.size() - 1).sum())
    if not df:
        return float("nan"), 0
    return float(np.sqrt((frame["value"] - by.transform("mean")).pow(2).sum() / df)), df


def _student_half(spread: float, df: int, level: float) -> float:
    from scipy.stats import t as student

    return float(spread * student.ppf(1 - (1 - level) / 2, df)) if df else float("nan")


def _group_means(values, groups, level: float) -> tuple[pd.DataFrame, float]:
    """Per group (in order of first appearance) its mean and size, and the Student-t half-width of a CI for a single
    value at the pooled within-group spread (NaN without repetitions)."""
    spread, df = pooled_spread(values, groups)
    frame = pd.DataFrame({"group": list(groups), "value": np.asarray(values, dtype=float)})
    means = frame.groupby("group", sort=False)["value"].agg(["mean", "size"]).reset_index()
    return means, _student_half(spread, df, level)


def pooled_group_means(values, groups, level: float = 0.95) -> pd.DataFrame:
    """Per group (in order of first appearance): the mean of its ``values`` with a Student-t CI whose spread is the
    within-group variance pooled over every group (:func:`pooled_spread`: a few repetitions per group still give a
    CI). Columns ``group``, ``value``, ``lo``, ``hi``, ``n``; NaN bounds when no group has two values."""
    means, unit = _group_means(values, groups, level)
    half = unit / np.sqrt(means["size"].to_numpy(float))
    return pd.DataFrame({"group": means["group"], "value": means["mean"], "lo": means["mean"] - half,
                         "hi": means["mean"] + half, "n": means["size"]})


def pooled_difference(values, groups, first, second, level: float = 0.95) -> Estimate:
    """The mean of group ``first`` minus that of ``second`` with a Student-t CI from the within-group spread pooled
    over every group (NaN bounds without repetitions); ``n`` counts the values of both."""
    means, unit = _group_means(values, groups, level)
    means = means.set_index("group")
    a, b = means.loc[first], means.loc[second]
    half = unit * np.sqrt(1 / a["size"] + 1 / b["size"])
    value = float(a["mean"] - b["mean"])
    return Estimate(value, value - half, value + half, int(a["size"] + b["size"]))


def bootstrap_ratio(numerator, denominator, groups=None, baseline=None, n_boot: int = 1000, level: float = 0.95,
                    seed: int = 0) -> Estimate:
    """``sum(numerator) / sum(denominator)`` (a rate: accepted per evaluated draft, tokens per second) with a
    percentile bootstrap CI over ``groups`` (rows when None). With ``baseline = (numerator_b, denominator_b)`` on
    the same rows, the paired difference of the two ratios (the same resampled groups for both). Replicates with a
    zero denominator are skipped; the value is NaN when the whole denominator is 0."""
    columns = [numerator, denominator, *(baseline or ())]
    sums = np.stack([_cluster_sums(np.asarray(c, dtype=float), groups)[0] for c in columns], axis=1)
    if sums.shape[0] == 0:
        raise ValueError("need at least one row")

    def statistic(totals: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = totals[..., 0] / totals[..., 1]
            return ratio - totals[..., 2] / totals[..., 3] if baseline is not None else ratio

    rng = np.random.default_rng(seed)
    stats = statistic(sums[rng.integers(0, len(sums), size=(n_boot, len(sums)))].sum(1))
    stats = stats[np.isfinite(stats)]
    tail = (1 - level) / 2
    lo, hi = np.quantile(stats, [tail, 1 - tail]) if stats.size else (np.nan, np.nan)
    return Estimate(float(statistic(sums.sum(0))), float(lo), float(hi), int(len(sums)))


def bootstrap_mae(predicted, true, groups=None, n_boot: int = 1000, level: float = 0.95,
                  seed: int = 0) -> Estimate:
    """MAE with a percentile bootstrap CI over ``groups`` (e.g. test prompts: the samples of one prompt
    are resampled together), or over rows when ``groups`` is None."""
    err = np.abs(np.asarray(predicted, dtype=float) - np.asarray(true, dtype=float))
    return bootstrap_mean(err, groups, n_boot, level, seed)


def varies(values, rtol: float = 1e-9) -> bool:
    """Whether ``values`` spread by more than ``rtol`` of their largest magnitude (float noise is constant)."""
    v = np.asarray(values, dtype=float)
    return v.size > 1 and bool(np.ptp(v) > rtol * np.abs(v).max())


def _pearson_from_sums(s: np.ndarray) -> np.ndarray:
    """Pearson r from sums ``[..., (n, x, y, xx, yy, xy)]`` (NaN where either variable is constant)."""
    n, x, y, xx, yy, xy = np.moveaxis(s, -1, 0)
    cov, vx, vy = xy - x * y / n, xx - x * x / n, yy - y * y / n
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(vx * vy)
    tiny = 1e-12 * n
    return np.where((vx > tiny) & (vy > tiny), np.clip(r, -1.0, 1.0), np.nan)


def bootstrap_correlation(x, y, groups=None, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> Estimate:
    """Pearson r of ``x`` and ``y`` with a percentile bootstrap CI over ``groups`` (e.g. runs: the tokens of one
    run are resampled together), or over rows when ``groups`` is None.

    Each group contributes its sums of ``(1, x, y, x^2, y^2, xy)`` (x and y centred and scaled on the pooled
    sample first, for precision); a replicate weights each group's sums by how often it was drawn. ``value`` is
    NaN when x or y is constant; the CI skips replicates where it is."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"need equal, non-empty 1-d shapes, got {x.shape} and {y.shape}")
    x, y = ((v - v.mean()) / v.std() if varies(v) else np.zeros_like(v) for v in (x, y))
    sums = np.stack([_cluster_sums(m, groups)[0] for m in (np.ones_like(x), x, y, x * x, y * y, x * y)], axis=1)
    rng = np.random.default_rng(seed)
    k = len(sums)
    stats = _pearson_from_sums(np.stack([np.bincount(rng.integers(0, k, k), minlength=k) @ sums
                                         for _ in range(n_boot)]))
    value = float(_pearson_from_sums(sums.sum(0)))
    tail = (1 - level) / 2
    lo, hi = np.nanquantile(stats, [tail, 1 - tail]) if np.isfinite(stats).any() else (np.nan, np.nan)
    return Estimate(value, float(lo), float(hi), int(len(sums)))


def paired_mae_difference(predicted_a, predicted_b, true, groups=None, n_boot: int = 1000, level: float = 0.95,
                          seed: int = 0) -> Estimate:
    """MAE(a) - MAE(b) on the same rows, with a paired bootstrap CI (the same resampled prompts for both);
    negative means ``a`` is better. A CI that excludes 0 is a difference this sample supports."""
    t = np.asarray(true, dtype=float)
    diff = np.abs(np.asarray(predicted_a, dtype=float) - t) - np.abs(np.asarray(predicted_b, dtype=float) - t)
    return _bootstrap(*_cluster_sums(diff, groups), n_boot, level, seed)


def kendall_tau(predicted, true) -> float:
    """Kendall's tau-b between predicted and true lengths (NaN with fewer than 2 rows or no variation)."""
    from scipy.stats import kendalltau

    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    if p.size < 2 or np.ptp(p) == 0 or np.ptp(t) == 0:
        return float("nan")
    return float(kendalltau(p, t).statistic)


def bootstrap_kendall_tau(predicted, true, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> Estimate:
    """Kendall's tau-b with a percentile bootstrap CI over rows (replicates without variation are skipped; the
    CI is NaN when all are)."""
    p, t = np.asarray(predicted, dtype=float), np.asarray(true, dtype=float)
    if p.shape != t.shape or p.ndim != 1 or p.size == 0:
        raise ValueError(f"need equal, non-empty 1-d shapes, got {p.shape} and {t.shape}")
    rng = np.random.default_rng(seed)
    stats = np.array([kendall_tau(p[rows], t[rows]) for rows in (rng.integers(0, p.size, p.size)
                                                                 for _ in range(n_boot))])
    tail = (1 - level) / 2
    lo, hi = np.nanquantile(stats, [tail, 1 - tail]) if np.isfinite(stats).any() else (np.nan, np.nan)
    return Estimate(kendall_tau(p, t), float(lo), float(hi), int(p.size))


DYNAMIC_STEPS = 32  # dynamic MAE: remaining length at steps 0..DYNAMIC_STEPS


def _per_step_constant(train: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """The constant reference for ``rows``: the train split's median true value at the same step (the best
    constant for MAE)."""
    medians = train.groupby("step")["true"].median()
    return rows["step"].map(medians).to_numpy(dtype=float)


def prediction_metrics(frame: pd.DataFrame, dynamic_steps: int = DYNAMIC_STEPS) -> dict:
    """The one metrics layout of every predictor, from its predictions (columns run_id, step, predicted, true,
    split; optional prompt_id and scenario).

    On the evaluation split (test, else val, else train for tiny datasets): static MAE (step 0) and dynamic MAE
    (steps 0..``dynamic_steps``, when the predictor has later steps), each with a bootstrap 95% CI over prompts,
    the constant reference (the train split's median true value at each step) and the paired difference to it
    with its CI; MAE per split and per scenario and Kendall tau at step 0; run counts per split.
    """
    eval_split = evaluation_split(frame["split"])
    groups = "prompt_id" if "prompt_id" in frame else "run_id"
    train, ev = frame[frame["split"] == "train"], frame[frame["split"] == eval_split]
    static = frame[frame["step"] == 0]
    out = {"eval_split": eval_split, "n_runs": int(ev["run_id"].nunique()),
           "n": static["split"].value_counts().to_dict(),
           "mae_by_split": {s: mae(g["predicted"], g["true"]) for s, g in static.groupby("split")}}
    spans = [("static", ev[ev["step"] == 0])]
    if (frame["step"] > 0).any():
        spans.append(("dynamic", ev[ev["step"] <= dynamic_steps]))
    for key, rows in spans:
        if rows.empty:
            continue
        est = bootstrap_mae(rows["predicted"], rows["true"], rows[groups])
        out.update({f"{key}_mae": est.value, f"{key}_mae_lo": est.lo, f"{key}_mae_hi": est.hi})
        constant = _per_step_constant(train, rows)
        if train.empty or np.isnan(constant).any():
            continue
        diff = paired_mae_difference(rows["predicted"], constant, rows["true"], rows[groups])
        out.update({f"constant_{key}_mae": mae(constant, rows["true"]), f"{key}_vs_constant": diff.value,
                    f"{key}_vs_constant_lo": diff.lo, f"{key}_vs_constant_hi": diff.hi})
    first = ev[ev["step"] == 0]
    if "scenario" in first:
        out["mae_by_scenario"] = {s: mae(g["predicted"], g["true"]) for s, g in first.groupby("scenario")}
    out["kendall_tau"] = kendall_tau(first["predicted"], first["true"]) if len(first) else float("nan")
    return out


@dataclass(frozen=True)
class BootstrapDraws:
    """A statistic, its bootstrap replicates and the number of clusters resampled; CIs at any level (Holm-adjusted
    ones too) and a two-sided bootstrap p-value against 0 come from the same replicates."""

    value: float
    draws: np.ndarray
    n: int

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        tail = (1 - level) / 2
        lo, hi = np.quantile(self.draws, [tail, 1 - tail])
        return float(lo), float(hi)

    def estimate(self, level: float = 0.95) -> Estimate:
        return Estimate(self.value, *self.ci(level), self.n)

    def p_value(self) -> float:
        """Two-sided: twice the smaller share of replicates on either side of 0 (at most 1, at least 1/B)."""
        below, above = (self.draws <= 0).mean(), (self.draws >= 0).mean()
        return float(min(1.0, max(2 * min(below, above), 1 / len(self.draws))))


def seeded_bootstrap(terms: Sequence[tuple[np.ndarray, float]], groups, n_boot: int = 4000, seed: int = 0,
                     chunk: int = 500) -> BootstrapDraws:
    """``sum(sign * mean error)`` over ``terms`` of per-(training seed, row) errors ``[S, N]`` on the same N rows,
    with one bootstrap that resamples the clusters ``groups`` (conversations: every row of one is drawn together)
    and, independently per term, its S training seeds. One term gives an MAE, two with signs +1 and -1 a paired
    difference whose CI carries both predictors' seed-to-seed spread."""
    errors = [np.atleast_2d(np.asarray(e, dtype=float)) for e, _ in terms]
    if not errors or any(e.shape[1] != errors[0].shape[1] or e.shape[1] == 0 for e in errors):
        raise ValueError("need terms of errors [seeds, rows] on the same, non-empty rows")
    codes, _ = pd.factorize(pd.Series(groups), sort=False)
    if len(codes) != errors[0].shape[1]:
        raise ValueError(f"{len(codes)} groups for {errors[0].shape[1]} rows")
    k = int(codes.max()) + 1
    counts = np.bincount(codes, minlength=k).astype(float)
    sums = [np.stack([np.bincount(codes, weights=row, minlength=k) for row in e]) for e in errors]
    signs = [float(s) for _, s in terms]
    value = sum(s * cs.mean(0).sum() for s, cs in zip(signs, sums)) / counts.sum()
    rng = np.random.default_rng(seed)
    draws = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        weights = _resample_counts(rng, b, k).astype(float)
        stat = np.zeros(b)
        for s, cs in zip(signs, sums):
            n_seeds = cs.shape[0]
            picks = _resample_counts(rng, b, n_seeds) / n_seeds
            stat += s * ((picks @ cs) * weights).sum(1)
        draws.append(stat / (weights @ counts))
    return BootstrapDraws(float(value), np.concatenate(draws), k)


def _resample_counts(rng: np.random.Generator, b: int, k: int) -> np.ndarray:
    """``[b, k]``: how often each of ``k`` items is drawn in each of ``b`` resamples of ``k`` with replacement. One
    draw of ``b x k`` indices: the same numbers, in the same order, as ``b`` draws of ``k`` (numpy's generator fills
    arrays element by element), so the replicates are those of a loop over resamples, without its per-call cost."""
    picks = rng.integers(0, k, (b, k)) + np.arange(b)[:, None] * k
    return np.bincount(picks.ravel(), minlength=b * k).reshape(b, k)
