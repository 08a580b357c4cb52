"""Length predictors as seen by the simulated cluster.

A predictor answers two questions about request ``i`` of a trace: its predicted total output
length when it enters decoding (:meth:`Predictor.static`) and its predicted remaining length after
``generated`` tokens (:meth:`Predictor.remaining`, progressive length prediction (PLP) updates).
Predictors live on the engine side (the oracle needs the truth); policies only ever receive their
outputs through :class:`analysis.serving.policies.RequestView`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import pandas as pd


class Predictor(ABC):
    """Static and progressive output-length predictions for the requests of one trace."""

    name: str = "predictor"

    @abstractmethod
    def static(self, i: int) -> float:
        """Predicted total output length of request ``i``."""

    def remaining(self, i: int, generated: int) -> float:
        """Predicted remaining length after ``generated`` tokens (default: static minus progress)."""
        return max(self.static(i) - generated, 1.0)


class OraclePredictor(Predictor):
    """The true lengths."""

    name = "oracle"

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

    def __init__(self, true_lengths: np.ndarray, mae: float, seed: int = 0, update_every: int = 32) -> None:
        if mae < 0 or update_every < 1:
            raise ValueError("noise MAE must be >= 0 and update_every >= 1")
        self._true = np.asarray(true_lengths, dtype=float)
        self.mae, self.seed, self.update_every = float(mae), int(seed), int(update_every)
        rng = np.random.default_rng(self.seed)
        self._static = np.maximum(self._true + rng.laplace(0.0, self.mae, size=len(self._true)), 1.0)
        self._table = rng.laplace(0.0, self.mae, size=self._TABLE)

    def static(self, i: int) -> float:
        return float(self._static[i])

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

    def __init__(self, value: float) -> None:
        if value < 1:
            raise ValueError("constant prediction must be >= 1 token")
        self.value = float(value)

    def static(self, i: int) -> float:
        return self.value


class StoredPredictor(Predictor):
    """Predictions of a predictor trained in the app, from ``store.predictions_frame(pid)``.

    Step 0 is the static prediction; a row at step ``s`` predicts the remaining length after ``s``
    generated tokens and is used from ``s`` on (minus the tokens generated since).
    """

    name = "stored"

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


PREDICTOR_KINDS = ("oracle", "oracle-noise", "constant", "stored")


def make_predictor(kind: str, output_tokens: np.ndarray, *, mae: float = 0.0, constant: float = 256.0,
                   seed: int = 0, update_every: int = 32, run_ids: np.ndarray | None = None,
                   predictions: pd.DataFrame | None = None) -> Predictor:
    """Build a predictor by name for a trace with true ``output_tokens``."""
    if kind == "oracle":
        return OraclePredictor(output_tokens)
    if kind == "oracle-noise":
        return NoisyOraclePredictor(output_tokens, mae, seed, update_every)
    if kind == "constant":
        return ConstantPredictor(constant)
    if kind == "stored":
        if run_ids is None or predictions is None:
            raise ValueError("a stored predictor needs a trace with run_id and the predictor's predictions")
        return StoredPredictor(run_ids, predictions)
    raise ValueError(f"unknown predictor {kind!r}; choose one of {', '.join(PREDICTOR_KINDS)}")
