"""Length predictors as seen by the simulated cluster.

A predictor answers two questions about request ``i`` of a trace: its predicted total output
length when it enters decoding (:meth:`Predictor.static`) and its predicted remaining length after
``generated`` tokens (:meth:`Predictor.remaining`, progressive length prediction (PLP) updates).
Predictors live on the engine side (the oracle needs the truth); policies only ever receive their
outputs through :class:`lenscope.analysis.scheduler.policies.RequestView`.

Each predictor kind declares its own options as a frozen dataclass (:class:`PredictorOptions`): typed fields, each
with its range and how a CLI flag or a form asks for it (:class:`Option`), and the label of a predictor made with
them. The registry (:data:`lenscope.analysis.scheduler.registry.PREDICTORS`) lists the kinds; callers read a kind's
options from there instead of branching on its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from lenscope.analysis.scheduler.length_buckets import bucket_of, quantile_edges
from lenscope.models.numbers import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, Range, check_fields

if TYPE_CHECKING:
    from lenscope.analysis.scheduler.external_predictions import PredictionPairs

EMPIRICAL_BUCKETS = 10  # quantile buckets of the true length an empirical prediction is drawn within
# Noise of the oracle+noise predictor (mean absolute error, tokens) and the constant predictor's length (tokens).
NOISE_MAE = NON_NEGATIVE
CONSTANT_LENGTH = Range(1)
# Where an option's value comes from: a number (a flag, a form's number input), a trained predictor of the store (an
# id: a flag, a form's select) or an imported predictions file (its digest: a --predictions PATH, a form's upload).
NUMBER, TRAINED_PREDICTOR, PREDICTIONS_FILE = "number", "trained-predictor", "predictions-file"


@dataclass(frozen=True)
class Option:
    """How one predictor option is asked for: its form label and CLI flag (None: not asked, its default holds), the
    range it takes, the value a flag and a form start from (``ask``), the form's upper bound and widget key, where the
    value comes from (``source``: :data:`NUMBER`, or a store-backed source the CLI and app resolve) and a help text."""

    label: str
    flag: str | None = None
    valid: Range | None = None
    ask: Any = None
    high: float | None = None
    key: str | None = None
    source: str = NUMBER
    help: str | None = None


def option(default: Any, **how) -> Any:
    """A field of a :class:`PredictorOptions` dataclass with its :class:`Option` (``how``) as metadata."""
    return field(default=default, metadata={"option": Option(**how)})


@dataclass(frozen=True)
class PredictorOptions:
    """A predictor kind's own options (this base: none): each field range-checked at construction, and ``label``,
    the predictor's name in results (part of the stored results' keys through :meth:`key_fields`)."""

    def __post_init__(self) -> None:
        check_fields(self, {name: o.valid for name, o in self.options() if o.valid is not None})

    @classmethod
    def options(cls) -> tuple[tuple[str, Option], ...]:
        """(field name, :class:`Option`) of every option of the kind."""
        return tuple((f.name, f.metadata["option"]) for f in fields(cls))

    @classmethod
    def asked(cls) -> tuple[tuple[str, Option], ...]:
        """The options a flag or a form asks for (the others keep their defaults)."""
        return tuple((name, o) for name, o in cls.options() if o.flag is not None)

    @classmethod
    def takes(cls, name: str) -> bool:
        return any(n == name for n, _ in cls.options())

    def key_fields(self) -> dict:
        return {name: getattr(self, name) for name, _ in self.options()}

    def label(self) -> str:
        raise NotImplementedError


class Predictor(ABC):
    """Static and progressive output-length predictions for the requests of one trace."""

    name: str = "predictor"
    # One line on what the kind is and its source (a paper, or lenscope's own): the CLI's help and the UI show it.
    description: str = "a predictor of output lengths"
    Options: ClassVar[type[PredictorOptions]] = PredictorOptions

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: PredictorOptions | None = None, seed: int = 0,
              **inputs) -> Predictor:
        """The predictor for a trace with true ``output_tokens``, from its kind's ``options`` (None: the defaults),
        the spec's ``seed`` and the ``inputs`` it reads (from the trace, :meth:`trace_inputs`, or the store)."""
        raise NotImplementedError

    @classmethod
    def trace_inputs(cls, trace: pd.DataFrame) -> dict:
        """The inputs of :meth:`build` this kind reads from the trace's columns (beyond the true lengths)."""
        return {}

    @abstractmethod
    def static(self, i: int) -> float:
        """Predicted total output length of request ``i``."""

    def remaining(self, i: int, generated: int) -> float:
        """Predicted remaining length after ``generated`` tokens (default: static minus progress)."""
        return max(self.static(i) - generated, 1.0)


class OraclePredictor(Predictor):
    """The true lengths."""

    name = "oracle"
    description = ("the true output lengths: a perfect predictor, the upper bound of what prediction can buy (the "
                   "reference of the OUTLETS preset)")

    @dataclass(frozen=True)
    class Options(PredictorOptions):
        def label(self) -> str:
            return "oracle"

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: PredictorOptions | None = None, seed: int = 0,
              **_) -> Predictor:
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
    description = ("the true length plus Laplace noise of mean absolute size --noise-mae, re-drawn every 32 "
                   "generated tokens: what a predictor of that accuracy buys (lenscope's accuracy sweep)")
    _TABLE = 1 << 16  # pre-drawn update noise, indexed by a hash of (request, update)

    @dataclass(frozen=True)
    class Options(PredictorOptions):
        mae: float = option(0.0, label="Noise MAE (tokens)", flag="--noise-mae", valid=NOISE_MAE, ask=50.0,
                            high=10_000.0, key="sched_mae", help="mean absolute error of the noise (tokens)")
        update_every: int = option(32, label="Tokens between re-drawn estimates", valid=POSITIVE_INT)

        def label(self) -> str:
            return f"oracle+noise (MAE {self.mae:g})"

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: Options | None = None, seed: int = 0, **_) -> Predictor:
        options = options or cls.Options()
        return cls(output_tokens, options.mae, seed, options.update_every)

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
    description = ("the same length for every request (--constant): no information, SJF degenerates to FCFS; the "
                   "reference every predictor must beat")

    @dataclass(frozen=True)
    class Options(PredictorOptions):
        constant: float = option(256.0, label="Constant length", flag="--constant", valid=CONSTANT_LENGTH, ask=256.0,
                                 high=100_000.0, help="the length predicted for every request (tokens)")

        def label(self) -> str:
            return f"constant {self.constant:g}"

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: Options | None = None, seed: int = 0, **_) -> Predictor:
        return cls((options or cls.Options()).constant)

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
    description = ("a predictor trained in lenscope (EGTP heads, PLP, probes, OUTLETS drafters, baselines; "
                   "--predictor-id): its stored predictions of the trace's runs, progressive ones updated as tokens "
                   "are generated")

    @dataclass(frozen=True)
    class Options(PredictorOptions):
        predictor_id: int | None = option(None, label="Trained predictor", flag="--predictor-id",
                                          valid=NON_NEGATIVE_INT, source=TRAINED_PREDICTOR,
                                          help="trained predictor id")

        def label(self) -> str:
            return f"stored predictor #{self.predictor_id}"

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: Options | None = None, seed: int = 0, *,
              run_ids: np.ndarray | None = None, predictions: pd.DataFrame | None = None, **_) -> Predictor:
        if run_ids is None or predictions is None:
            raise ValueError("a stored predictor needs a trace with run_id and the predictor's predictions")
        return cls(run_ids, predictions)

    def __init__(self, run_ids: np.ndarray, predictions: pd.DataFrame) -> None:
        runs = predictions["run_id"].to_numpy(np.int64)
        steps = predictions["step"].to_numpy(np.int64)
        order = np.lexsort((steps, runs))  # by run, then step
        runs, steps, preds = runs[order], steps[order], predictions["predicted"].to_numpy(float)[order]
        ids, starts = np.unique(runs, return_index=True)
        spans = dict(zip(ids.tolist(), zip(starts.tolist(), [*starts[1:].tolist(), len(runs)])))
        wanted = [spans.get(int(r)) for r in run_ids]
        missing = [int(r) for r, span in zip(run_ids, wanted) if span is None or not (steps[slice(*span)] == 0).any()]
        if missing:
            raise ValueError(f"the predictor has no step-0 prediction for runs {missing[:20]}"
                             f"{' ...' if len(missing) > 20 else ''}")
        self._steps = [steps[slice(*span)] for span in wanted]
        self._preds = [preds[slice(*span)] for span in wanted]

    def static(self, i: int) -> float:
        return max(float(self._preds[i][0]), 1.0)

    def remaining(self, i: int, generated: int) -> float:
        k = int(np.searchsorted(self._steps[i], generated, side="right")) - 1
        return max(float(self._preds[i][k]) - (generated - self._steps[i][k]), 1.0)


class TraceColumnPredictor(Predictor):
    """The predictions a trace carries (its ``predicted_tokens`` column), clipped at 1 token."""

    name = "trace-column"
    description = ("the predictions the trace itself carries (its predicted_tokens column, or the column a "
                   "--columns mapping names): any predictor run outside lenscope")

    @dataclass(frozen=True)
    class Options(PredictorOptions):
        def label(self) -> str:
            return "trace column predicted_tokens"

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: PredictorOptions | None = None, seed: int = 0, *,
              predicted: np.ndarray | None = None, **_) -> Predictor:
        if predicted is None:
            raise ValueError("the trace has no predicted_tokens column (a column mapping can name another one)")
        return cls(predicted)

    @classmethod
    def trace_inputs(cls, trace: pd.DataFrame) -> dict:
        return {"predicted": trace["predicted_tokens"].to_numpy(float)} if "predicted_tokens" in trace else {}

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
    description = ("an external predictor's real error: each request's prediction drawn from the (true length, "
                   "prediction) pairs of a --predictions file with a similar true length")

    @dataclass(frozen=True)
    class Options(PredictorOptions):
        predictions: str | None = option(None, label="Predictions file", flag="--predictions",
                                         source=PREDICTIONS_FILE,
                                         help="an external predictor's (true length, prediction) file: predictions "
                                              "drawn from it conditionally on the true length")

        def label(self) -> str:
            return f"empirical (file {(self.predictions or '')[:8]})"

    @classmethod
    def build(cls, output_tokens: np.ndarray, options: Options | None = None, seed: int = 0, *,
              pairs: PredictionPairs | None = None, **_) -> Predictor:
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
