"""Length predictors as seen by the simulated cluster.

A predictor answers two questions about request ``i`` of a trace: its predicted total output
length when it enters decoding (:meth:`Predictor.static`) and its predicted remaining length after
``generated`` tokens (:meth:`Predictor.remaining`, progressive length prediction (PLP) updates).
Predictors live on the engine side (the oracle needs the truth); policies only ever receive their
outputs through :class:`lenscope.analysis.scheduler.policies.RequestView`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from lenscope.analysis.scheduler.length_buckets import bucket_of, quantile_edges
from lenscope.models.numbers import NON_NEGATIVE, POSITIVE_INT, Range

if TYPE_CHECKING:
    from lenscope.analysis.scheduler.external_predictions import PredictionPairs

EMPIRICAL_BUCKETS = 10  # quantile buckets of the true length an empirical prediction is drawn within
# Noise of the oracle+noise predictor (mean absolute error, tokens) and the constant predictor's length (tokens).
NOISE_MAE = NON_NEGATIVE
CONSTANT_LENGTH = Range(1)


class Predictor(ABC):
    """Static and progressive output-length predictions for the requests of one trace."""

    name: str = "predictor"

    @classmethod
    def build(cls, output_tokens: np.ndarray, **options) -> Predictor:
        """The predictor for a trace with true ``output_tokens``, from the options of ``make_predictor`` it reads."""
        raise NotImplementedError

    @abstractmethod
    def static(self, i: int) -> float:
        """Predicted total output length of request ``i``."""

    def remaining(self, i: int, generated: int) -> float:
        """Predicted remaining length after ``generated`` tokens (default: static minus progress)."""
        return max(self.static(i) - generated, 1.0)


class OraclePredictor(Predictor):
    """The true lengths."""

    name = "oracle"

    @classmethod
    def build(cls, output_tokens: np.ndarray, **_) -> Predictor:
        return cls(output_tokens)

    def __init__(self, true_lengths: np.ndarray) -> None:
        self._true = np.asarray(true_lengths, dtype=float)

    def static(self, i: int) -> float:
        return float(self._true[i])

    def remaining(self, i: int, generated: int) -> float:
        return max(float(self._true[i]) - generated, 1.0)


class NoisyOraclePredictor(Predictor):
    """True length plus Laplace noise of mean absolute size ``mae`` (clipped at 1 token).

    Every ``update_every`` generated tokens the remaining-length estimate is re-drawn around the
    true remaining length (fresh noise, deterministic in ``seed``, request and update index; drawn
    from a pre-sampled table so that updates cost no RNG call).
    """

    name = "oracle-noise"
    _TABLE = 1 << 16  # pre-drawn update noise, indexed by a hash of (request, update)

    @classmethod
    def build(cls, output_tokens: np.ndarray, *, mae: float = 0.0, seed: int = 0, update_every: int = 32,
              **_) -> Predictor:
        return cls(output_tokens, mae, seed, update_every)

    def __init__(self, true_lengths: np.ndarray, mae: float, seed: int = 0, update_every: int = 32) -> None:
        NOISE_MAE.check("noise MAE", mae)
        POSITIVE_INT.check("update_every", update_every)
        self._true = np.asarray(true_lengths, dtype=float)
        self.mae, self.seed, self.update_every = float(mae), int(seed), int(update_every)
        rng = np.random.default_rng(self.seed)
        self._static = np.maximum(self._true + rng.laplace(0.0, self.mae, size=len(self._true)), 1.0).tolist()
        self._table = rng.laplace(0.0, self.mae, size=self._TABLE)

    def static(self, i: int) -> float:
        return self._static[i]

    def remaining(self, i: int, generated: int) -> float:
        update = generated // self.update_every
        if update == 0:
            return max(self._static[i] - generated, 1.0)
        at = update * self.update_every
        noise = self._table[(i * 1_000_003 + update * 7_919) % self._TABLE]
        return max(float(self._true[i]) - at + noise - (generated - at), 1.0)


class ConstantPredictor(Predictor):
    """The same length for every request (no information: SJF degenerates to FCFS)."""

    name = "constant"

    @classmethod
    def build(cls, output_tokens: np.ndarray, *, constant: float = 256.0, **_) -> Predictor:
        return cls(constant)

    def __init__(self, value: float) -> None:
        CONSTANT_LENGTH.check("constant prediction", value)
        self.value = float(value)

    def static(self, i: int) -> float:
        return self.value


class StoredPredictor(Predictor):
    """Predictions of a predictor trained in the app, from ``store.predictions_frame(pid)``.

    Step 0 is the static prediction; a row at step ``s`` predicts the remaining length after ``s``
    generated tokens and is used from ``s`` on (minus the tokens generated since).
    """

    name = "stored"

    @classmethod
    def build(cls, output_tokens: np.ndarray, *, run_ids: np.ndarray | None = None,
              predictions: pd.DataFrame | None = None, **_) -> Predictor:
        if run_ids is None or predictions is None:
            raise ValueError("a stored predictor needs a trace with run_id and the predictor's predictions")
        return cls(run_ids, predictions)

    def __init__(self, run_ids: np.ndarray, predictions: pd.DataFrame) -> None:
        by_run = {int(r): g for r, g in predictions.groupby("run_id")}
        missing = [int(r) for r in run_ids if int(r) not in by_run or not (by_run[int(r)]["step"] == 0).any()]
        if missing:
            raise ValueError(f"the predictor has no step-0 prediction for runs {missing[:20]}"
                             f"{' ...' if len(missing) > 20 else ''}")
        self._steps = [by_run[int(r)]["step"].to_numpy(int) for r in run_ids]
        self._preds = [by_run[int(r)]["predicted"].to_numpy(float) for r in run_ids]
        for k, steps in enumerate(self._steps):
            order = np.argsort(steps)
            self._steps[k], self._preds[k] = steps[order], self._preds[k][order]

    def static(self, i: int) -> float:
        return max(float(self._preds[i][0]), 1.0)

    def remaining(self, i: int, generated: int) -> float:
        k = int(np.searchsorted(self._steps[i], generated, side="right")) - 1
        return max(float(self._preds[i][k]) - (generated - self._steps[i][k]), 1.0)


class TraceColumnPredictor(Predictor):
    """The predictions a trace carries (its ``predicted_tokens`` column), clipped at 1 token."""

    name = "trace-column"

    @classmethod
    def build(cls, output_tokens: np.ndarray, *, predicted: np.ndarray | None = None, **_) -> Predictor:
        if predicted is None:
            raise ValueError("the trace has no predicted_tokens column (a column mapping can name another one)")
        return cls(predicted)

    def __init__(self, predicted: np.ndarray) -> None:
        self._predicted = np.maximum(np.asarray(predicted, dtype=float), 1.0)

    def static(self, i: int) -> float:
        return float(self._predicted[i])


class EmpiricalPredictor(Predictor):
    """An external predictor's real error: predictions drawn from its (true length, prediction) pairs conditionally
    on the true length.

    The pairs' true lengths are cut into ``n_buckets`` quantile buckets; request ``i`` gets the prediction of a pair
    drawn (seeded) from the bucket of its own true length (lengths beyond the pairs' range use the end buckets), so
    that per bucket the simulated predictions follow the file's. ``ranks`` marks class indices without bucket
    edges: they carry order only, so the remaining-length estimate stays the rank (SJF orders by them; LB and
    SRPT read them as token counts).
    """

    name = "empirical"

    @classmethod
    def build(cls, output_tokens: np.ndarray, *, pairs: PredictionPairs | None = None, seed: int = 0,
              **_) -> Predictor:
        if pairs is None:
            raise ValueError("an empirical predictor needs a predictions file of (true length, prediction) pairs")
        return cls(output_tokens, pairs.true, pairs.policy_values(), ranks=pairs.lengths() is None, seed=seed)

    def __init__(self, true_lengths: np.ndarray, pair_true: np.ndarray, pair_values: np.ndarray, *,
                 ranks: bool = False, n_buckets: int = EMPIRICAL_BUCKETS, seed: int = 0) -> None:
        edges = quantile_edges(pair_true, n_buckets)
        pair_bucket = bucket_of(pair_true, edges)
        by_bucket = np.asarray(pair_values, dtype=float)[np.argsort(pair_bucket, kind="stable")]
        counts = np.bincount(pair_bucket, minlength=len(edges) - 1)  # none is empty: edges are observed values
        starts = np.cumsum(counts) - counts
        wanted = bucket_of(true_lengths, edges)
        draws = np.random.default_rng(seed).random(len(wanted))
        drawn = by_bucket[starts[wanted] + (draws * counts[wanted]).astype(np.int64)]
        self.ranks = ranks
        self._static = drawn if ranks else np.maximum(drawn, 1.0)

    def static(self, i: int) -> float:
        return float(self._static[i])

    def remaining(self, i: int, generated: int) -> float:
        return float(self._static[i]) if self.ranks else max(float(self._static[i]) - generated, 1.0)
