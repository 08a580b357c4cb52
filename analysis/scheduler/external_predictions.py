"""An external predictor's (true length, prediction) pairs: reading, checking and evaluating them.

A predictions file is a CSV or JSON-lines table, read like a trace (with the trace upload's limits on size, or
none for a file read from disk), holding one row per request: the true output length and the predictor's
prediction. Columns are found by name (:data:`TRUE_COLUMNS`, :data:`PREDICTED_COLUMNS`, :data:`CLASS_COLUMNS`) or
named in a :class:`PredictionsFormat`.
Predictions are token lengths or bucket/class indices. Class indices are ranks, which is all that
shortest-job-first needs; with bucket edges they stand for their buckets' midpoints, so an MAE can be computed.
Token predictions that are all small whole numbers below most true lengths look like class indices read as lengths
(:meth:`PredictionPairs.class_index_warning`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lenscope.analysis.core.metrics import Estimate, bootstrap_kendall_tau, bootstrap_mae, ci_text, kendall_tau, mae
from lenscope.analysis.core.safe_files import column_list
from lenscope.analysis.scheduler.length_buckets import bucket_labels, bucket_of, quantile_edges
from lenscope.analysis.scheduler.traces import (
    MAX_ROWS,
    MAX_TOKENS,
    MAX_UPLOAD_BYTES,
    Source,
    line_list,
    named_errors,
    predicted_lengths,
    read_trace_table,
    token_counts,
)

TRUE_COLUMNS = ("true_tokens", "true_length", "true", "output_tokens")
PREDICTED_COLUMNS = ("predicted_tokens", "predicted_length", "predicted", "prediction")
CLASS_COLUMNS = ("predicted_class", "predicted_bucket", "class", "bucket")  # read as class indices
BOOT_PAIRS = 50_000  # the bootstraps resample at most this many pairs (a subsample beyond), bounding memory and time
MAX_CLASS_INDEX = 19  # token predictions all whole numbers up to this, below most true lengths, look like classes
CONFUSION_BUCKETS = 5  # quantile buckets of the true lengths for token predictions
MAX_CLASS_ROWS = 10  # rows of the confusion table of rank-only classes (quantile buckets of the true lengths)
BOOT_ROWS = 10_000_000  # resampled rows per statistic: 1,000 resamples up to 10,000 pairs, fewer (200) beyond
MIN_BOOT, MAX_BOOT = 200, 1000
# Kendall tau of fewer pairs is not judged: 3 pairs in order give tau 1.000 with a bootstrap CI of [1.000, 1.000].
MIN_TAU_PAIRS = 10


@dataclass(frozen=True)
class PredictionsFormat:
    """The columns with the true lengths and the predictions (found by name when None), whether predictions are
    class indices (None: when their column has a class name or bucket edges are given), and the classes'
    bucket edges in tokens (K + 1 increasing edges for classes 0 .. K - 1)."""

    true: str | None = None
    predicted: str | None = None
    classes: bool | None = None
    bucket_edges: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.bucket_edges is None:
            return
        edges = np.asarray(self.bucket_edges, dtype=float)
        if len(edges) < 2 or not np.isfinite(edges).all() or (edges < 0).any() or (np.diff(edges) <= 0).any():
            raise ValueError("bucket edges need at least 2 increasing, non-negative numbers (K + 1 edges for "
                             f"classes 0 .. K - 1), not {list(self.bucket_edges)}")
        if self.classes is False:
            raise ValueError("bucket edges give the token ranges of class predictions; they need class indices")


def predictions_format(columns: str = "", classes: bool = False, bucket_edges: str = "") -> PredictionsFormat:
    """A :class:`PredictionsFormat` from the CLI's or the page's text: ``true=COL,predicted=COL`` (either may be
    left out), whether predictions are class indices (False: decided by the column's name) and comma-separated
    bucket edges."""
    named: dict[str, str] = {}
    for part in filter(str.strip, columns.split(",")):
        key, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not column or key not in ("true", "predicted") or key in named:
            raise ValueError(f"prediction columns need true=COL and/or predicted=COL, each once; got {part.strip()!r}")
        named[key] = column
    try:
        edges = tuple(float(x) for x in bucket_edges.split(",") if x.strip()) or None
    except ValueError:
        raise ValueError(f"bucket edges must be comma-separated numbers, not {bucket_edges!r}") from None
    return PredictionsFormat(named.get("true"), named.get("predicted"), True if classes else None, edges)


@dataclass(frozen=True)
class PredictionPairs:
    """True lengths and predictions, row by row: token lengths, or class indices when ``classes``."""

    true: np.ndarray
    predicted: np.ndarray
    classes: bool = False
    bucket_edges: tuple[float, ...] | None = None

    def lengths(self) -> np.ndarray | None:
        """Predicted lengths in tokens: the predictions, or their buckets' midpoints; None for ranks only."""
        if not self.classes:
            return self.predicted
        if self.bucket_edges is None:
            return None
        edges = np.asarray(self.bucket_edges, dtype=float)
        return ((edges[:-1] + edges[1:]) / 2)[self.predicted.astype(np.int64)]

    def class_index_warning(self) -> str | None:
        """Why token predictions look like class indices read as token lengths (every one a whole number from 0 to
        :data:`MAX_CLASS_INDEX`, all below the median true length), or None when they do not."""
        top, median = self.predicted.max(), float(np.median(self.true))
        if self.classes or top > MAX_CLASS_INDEX or top >= median or (self.predicted != self.predicted.round()).any():
            return None
        values = np.unique(self.predicted)
        return (f"every prediction is a whole number from {values[0]:.0f} to {top:.0f} ({len(values)} distinct "
                f"values) while the median true length is {median:g} tokens: these look like class indices, read "
                "here as token lengths")

    def policy_values(self) -> np.ndarray:
        """What scheduling policies see: predicted lengths, or the class indices themselves (ranks)."""
        lengths = self.lengths()
        return self.predicted if lengths is None else lengths

    def to_dict(self) -> dict:
        return {"true": self.true.tolist(), "predicted": self.predicted.tolist(), "classes": self.classes,
                "bucket_edges": None if self.bucket_edges is None else list(self.bucket_edges)}

    @classmethod
    def from_dict(cls, data: dict) -> PredictionPairs:
        edges = data["bucket_edges"]
        return cls(np.asarray(data["true"], dtype=np.int64), np.asarray(data["predicted"], dtype=float),
                   bool(data["classes"]), None if edges is None else tuple(edges))


def _column(columns, named: str | None, candidates: tuple[str, ...], role: str, key: str) -> str:
    if named is not None and named not in columns:
        raise ValueError(f"the predictions file has no column {named!r}; its columns are {column_list(columns)}")
    found = named or next((c for c in candidates if c in columns), None)
    if found is None:
        raise ValueError(f"the predictions file has no {role} column (one of {', '.join(candidates)}); its columns "
                         f"are {column_list(columns)}: rename one, or name it with `--prediction-columns {key}=COL`")
    return found


def parse_predictions(raw: pd.DataFrame, fmt: PredictionsFormat = PredictionsFormat()) -> PredictionPairs:
    """The pairs in the raw columns of :func:`lenscope.analysis.scheduler.traces.read_trace_table` (indexed by file
    line).

    True lengths must be whole numbers from 1; token predictions numbers from 0; class indices whole numbers from 0
    (below the number of buckets when edges are given). All problems are reported together with their lines."""
    if raw.empty:
        raise ValueError("the predictions file has no rows")
    true_col = _column(raw.columns, fmt.true, TRUE_COLUMNS, "true-length", "true")
    pred_col = _column(raw.columns, fmt.predicted, PREDICTED_COLUMNS + CLASS_COLUMNS, "prediction", "predicted")
    classes = fmt.classes if fmt.classes is not None else pred_col in CLASS_COLUMNS or fmt.bucket_edges is not None
    true, bad_true = token_counts(raw[true_col])
    if classes:
        predicted = pd.to_numeric(raw[pred_col], errors="coerce").astype(float)
        top = np.inf if fmt.bucket_edges is None else len(fmt.bucket_edges) - 2
        bad = predicted.isna() | (predicted < 0) | (predicted != predicted.round()) | (predicted > top)
        rule = "class indices from 0" + ("" if top == np.inf else f" to {top} (one per bucket between the edges)")
    else:
        predicted, bad = predicted_lengths(raw[pred_col])
        rule = f"numbers from 0 to {MAX_TOKENS:,} (token lengths; class indices need --classes)"
    problems = [f"column {col!r} needs {why}: lines {line_list(mask)}" for col, why, mask in
                [(true_col, f"whole numbers from 1 to {MAX_TOKENS:,}", bad_true), (pred_col, rule, bad)] if mask.any()]
    if problems:
        raise ValueError("malformed predictions file; " + "; ".join(problems))
    if len(raw) < 2:
        raise ValueError("the predictions file needs at least 2 rows (pairs) to be evaluated")
    return PredictionPairs(true.to_numpy(np.int64), predicted.to_numpy(float), classes, fmt.bucket_edges)


def load_predictions_file(source: Source, fmt: PredictionsFormat = PredictionsFormat(),
                          max_bytes: int | None = MAX_UPLOAD_BYTES, max_rows: int | None = MAX_ROWS,
                          name: str | None = None) -> PredictionPairs:
    """Read and check a predictions file (path, bytes or binary file): by default within the upload limits of
    traces, :data:`MAX_UPLOAD_BYTES` and :data:`MAX_ROWS` rows (None: no row limit, and bytes in memory unbounded;
    a path always within :func:`lenscope.analysis.core.safe_files.disk_limit`), and always within the bounds of
    :mod:`lenscope.analysis.core.safe_files` on lines, columns, JSON nesting and integer digits. ``name`` names the file
    in messages (default: its path)."""
    raw = read_trace_table(source, max_bytes, max_rows, "predictions", name)
    return named_errors(source, "predictions", name, parse_predictions, raw, fmt)


def confusion_table(pairs: PredictionPairs) -> pd.DataFrame:
    """Counts of pairs per true-length bucket (rows) and predicted bucket or class (columns).

    Buckets are the classes' bucket edges, or quantile buckets of the true lengths: as many as the classes of
    rank-only predictions (at most :data:`MAX_CLASS_ROWS`), :data:`CONFUSION_BUCKETS` for token predictions, whose
    predictions are cut at the same edges."""
    if pairs.classes and pairs.bucket_edges is not None:
        edges = np.asarray(pairs.bucket_edges, dtype=float)
        columns, predicted = bucket_labels(edges), np.asarray(bucket_labels(edges))[pairs.predicted.astype(int)]
    elif pairs.classes:
        classes = np.unique(pairs.predicted).astype(int)
        edges = quantile_edges(pairs.true, min(len(classes), MAX_CLASS_ROWS))
        columns = [f"class {c}" for c in classes]
        predicted = np.asarray([f"class {c}" for c in pairs.predicted.astype(int)])
    else:
        edges = quantile_edges(pairs.true, CONFUSION_BUCKETS)
        columns = bucket_labels(edges)
        predicted = np.asarray(columns)[bucket_of(pairs.predicted, edges)]
    rows = bucket_labels(edges)
    true = np.asarray(rows)[bucket_of(pairs.true, edges)]
    table = pd.crosstab(pd.Series(true, name="true length"), pd.Series(predicted, name="predicted"))
    return table.reindex(index=rows, columns=columns, fill_value=0)


def _to_json(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _estimate(data: list | None) -> Estimate | None:
    return None if data is None else Estimate(*(np.nan if v is None else v for v in data[:3]), int(data[3]))


@dataclass(frozen=True)
class PredictionEvaluation:
    """How well the predictions match the true lengths: the number of pairs, MAE in tokens (None for ranks only)
    and Kendall tau, each with a 95% bootstrap CI over pairs (``n_boot`` resamples, of a subsample of
    :data:`BOOT_PAIRS` pairs beyond that many), and the confusion counts."""

    n: int
    mae: Estimate | None
    kendall_tau: Estimate
    n_boot: int
    confusion: pd.DataFrame

    def mae_text(self) -> str:
        """``MAE [lo, hi]`` in tokens, or why there is none."""
        if self.mae is None:
            return "not computed (class indices without bucket edges are ranks only)"
        return ci_text(self.mae.value, self.mae.lo, self.mae.hi)

    def tau_text(self) -> str:
        """``tau [lo, hi]``, or why there is none (``too few pairs to judge (n = 3)`` under :data:`MIN_TAU_PAIRS`)."""
        tau = self.kendall_tau
        if self.n < MIN_TAU_PAIRS:
            return f"too few pairs to judge (n = {self.n:,})"
        if np.isnan(tau.value):
            return "undefined (the predictions or the true lengths do not vary)"
        return ci_text(tau.value, tau.lo, tau.hi, digits=3)

    def lines(self) -> list[str]:
        """The summary as text: sample count, MAE (when lengths are known), Kendall tau, the CIs' resamples."""
        resamples = f"{self.n_boot:,} resamples" + (f" of a {BOOT_PAIRS:,}-pair subsample, scaled to all pairs"
                                                     if self.n > BOOT_PAIRS else "")
        return [f"n = {self.n:,} pairs", f"MAE {self.mae_text()}" + (" tokens" if self.mae else ""),
                f"Kendall tau{':' if self.n < MIN_TAU_PAIRS else ''} {self.tau_text()}",
                f"[95% bootstrap CIs over pairs, {resamples}]"]

    def to_dict(self) -> dict:
        def estimate(e: Estimate | None) -> list | None:
            return None if e is None else [_to_json(e.value), _to_json(e.lo), _to_json(e.hi), e.n]

        return {"n": self.n, "mae": estimate(self.mae), "kendall_tau": estimate(self.kendall_tau),
                "n_boot": self.n_boot, "confusion": self.confusion.to_dict(orient="split")}

    @classmethod
    def from_dict(cls, data: dict) -> PredictionEvaluation:
        split = data["confusion"]
        confusion = pd.DataFrame(split["data"], index=pd.Index(split["index"], name="true length"),
                                 columns=pd.Index(split["columns"], name="predicted"))
        return cls(int(data["n"]), _estimate(data["mae"]), _estimate(data["kendall_tau"]), int(data["n_boot"]),
                   confusion)


def _bounded_bootstrap(bootstrap: Callable[..., Estimate], statistic: Callable[[np.ndarray, np.ndarray], float],
                       predicted: np.ndarray, true: np.ndarray, n_boot: int, seed: int) -> Estimate:
    """``bootstrap(predicted, true)`` over all pairs, or, beyond :data:`BOOT_PAIRS` of them, an m-out-of-n bootstrap:
    over a seeded subsample of that many pairs, its CI's offsets from the subsample's value shrunk by
    sqrt(BOOT_PAIRS / n) around ``statistic`` of all pairs."""
    n = len(true)
    if n <= BOOT_PAIRS:
        return bootstrap(predicted, true, n_boot=n_boot, seed=seed)
    rows = np.random.default_rng(seed).choice(n, BOOT_PAIRS, replace=False)
    sub, value = bootstrap(predicted[rows], true[rows], n_boot=n_boot, seed=seed), statistic(predicted, true)
    scale = np.sqrt(BOOT_PAIRS / n)
    return Estimate(value, value - (sub.value - sub.lo) * scale, value + (sub.hi - sub.value) * scale, n)


def evaluate_predictions(pairs: PredictionPairs, seed: int = 0) -> PredictionEvaluation:
    """MAE (token predictions, or classes with bucket edges) and Kendall tau with 95% bootstrap CIs over pairs, and
    the confusion table. To bound time and memory, resamples are 1,000, fewer (at least 200) beyond 10,000 pairs,
    and beyond :data:`BOOT_PAIRS` pairs they are drawn from a subsample (:func:`_bounded_bootstrap`)."""
    n = len(pairs.true)
    n_boot = int(np.clip(BOOT_ROWS // min(n, BOOT_PAIRS), MIN_BOOT, MAX_BOOT))
    lengths = pairs.lengths()
    error = None if lengths is None else _bounded_bootstrap(bootstrap_mae, mae, lengths, pairs.true, n_boot, seed)
    tau = _bounded_bootstrap(bootstrap_kendall_tau, kendall_tau, pairs.predicted, pairs.true, n_boot, seed)
    return PredictionEvaluation(n, error, tau, n_boot, confusion_table(pairs))
