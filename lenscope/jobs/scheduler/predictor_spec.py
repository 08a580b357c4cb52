"""Which predictor feeds the simulated policies (:class:`PredictorSpec`: a kind of the registry, that kind's own typed
options and a seed), and the one place predictors are built from the store.

The kinds and their options live in :data:`lenscope.analysis.scheduler.registry.PREDICTORS`; the kinds that read the
store (a trained predictor's predictions, an imported predictions file's pairs) register here how their inputs are
fetched (:data:`STORE_INPUTS`, keyed by the kind's options class), so :func:`build_predictor` is a lookup, not a chain
of kind names.

A spec is part of the key of every stored simulation result (:meth:`PredictorSpec.key`). The key keeps the shape of
the flat spec the results were stored under before the options were typed: the kind, the seed, the options of the
kinds of then (:data:`LEGACY_KEY`) at their defaults, the kind's own options over them. A kind's own options at the
same values give the key they gave before; options of other kinds no longer enter (an old key with one set, e.g.
``simulate --predictor oracle --constant 300``, is simply not found again); a kind added later adds its own fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from lenscope.analysis.scheduler.predictors import EmpiricalPredictor, PredictorOptions, StoredPredictor
from lenscope.analysis.scheduler.registry import predictor_kind, predictor_options
from lenscope.jobs.scheduler.external_predictions import stored_pairs
from lenscope.models.numbers import SEED
from lenscope.store.store import Store

# The fields of the flat spec results were keyed by before options were typed, at their defaults then.
LEGACY_KEY = {"mae": 0.0, "constant": 256.0, "predictor_id": None, "update_every": 32, "predictions": None}


@dataclass(frozen=True, init=False)
class PredictorSpec:
    """A predictor kind, its own options (an instance of the kind's options dataclass) and the seed of its random
    draws (noise, empirical draws; the preset and sweeps offset it per seed).

    ``PredictorSpec("oracle-noise", mae=50)`` builds the options from keywords: a value out of its range is refused
    in the range's words, an option of another kind by name."""

    kind: str
    options: PredictorOptions
    seed: int

    def __init__(self, kind: str = "oracle", options: PredictorOptions | None = None, seed: int = 0,
                 **fields) -> None:
        entry = predictor_kind(kind)
        SEED.check("seed", seed)
        if options is None:
            known = predictor_options()
            for name, value in fields.items():  # a value out of range reads the same whichever kind was meant
                valid = known[name].valid if name in known else None
                if valid is not None and value is not None:
                    valid.check(name, value)
            foreign = sorted(set(fields) - {name for name, _ in entry.options.options()})
            if foreign:
                own = ", ".join(name for name, _ in entry.options.options()) or "none"
                raise ValueError(f"the {kind} predictor takes no option {', '.join(foreign)} (its options: {own})")
            options = entry.options(**fields)
        elif fields:
            raise TypeError("give a predictor's options either as an options object or as keywords")
        if type(options) is not entry.options:
            raise TypeError(f"the {kind} predictor's options are {entry.options.__qualname__}, "
                            f"not {type(options).__qualname__}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "seed", seed)

    def label(self) -> str:
        return self.options.label()

    def takes(self, name: str) -> bool:
        """Whether this kind has an option ``name`` (e.g. the noise level a sweep varies)."""
        return self.options.takes(name)

    def with_options(self, **changes) -> PredictorSpec:
        return replace(self, options=replace(self.options, **changes))

    def key(self) -> dict:
        """The spec in stored results' keys (the shape of the flat spec of old; see the module's docstring)."""
        return {"kind": self.kind, **LEGACY_KEY, **self.options.key_fields(), "seed": self.seed}


def check_out_of_sample(predictions: pd.DataFrame, run_ids: np.ndarray) -> None:
    """Refuse a replay that would feed a trained predictor's in-sample predictions: every run of the trace
    must be a test-split run of that predictor."""
    splits = predictions.drop_duplicates("run_id").set_index("run_id")["split"]
    seen = splits.reindex(run_ids)
    in_sample = int((seen != "test").sum())
    if in_sample:
        raise ValueError(f"{in_sample} of {len(run_ids)} runs of this trace are not in the predictor's test split "
                         "(in-sample or unseen); replay its test runs only (`--split test`, the page's default)")


def _trained_predictions(store: Store, options: StoredPredictor.Options, trace: pd.DataFrame) -> dict:
    """A trained predictor's out-of-sample predictions for the trace's runs."""
    if options.predictor_id is None:
        raise ValueError("choose a trained predictor (predictor_id)")
    if "run_id" not in trace or trace["run_id"].isna().any():
        raise ValueError("a trained predictor needs a trace built from the app's runs (with run ids)")
    if options.predictor_id not in set(store.predictors_frame()["predictor_id"].astype(int)):
        raise ValueError(f"no trained predictor with id {options.predictor_id}; the Results page and "
                         "`python -m lenscope claims` list the stored ones")
    predictions, run_ids = store.predictions_frame(options.predictor_id), trace["run_id"].to_numpy(np.int64)
    check_out_of_sample(predictions, run_ids)
    return {"predictions": predictions, "run_ids": run_ids}


def _imported_pairs(store: Store, options: EmpiricalPredictor.Options, trace: pd.DataFrame) -> dict:
    """The (true length, prediction) pairs of an imported predictions file."""
    return {"pairs": stored_pairs(store, options.predictions)}


# How the kinds that read the store fetch their inputs, by their options class (the others need none).
STORE_INPUTS: dict[type[PredictorOptions], Callable[[Store, PredictorOptions, pd.DataFrame], dict]] = {
    StoredPredictor.Options: _trained_predictions,
    EmpiricalPredictor.Options: _imported_pairs,
}


def build_predictor(store: Store, spec: PredictorSpec, trace: pd.DataFrame):
    """The predictor of ``spec`` for ``trace``: the kind's entry builds it from the trace's true lengths and the
    columns it reads (the trace-column kind: predicted_tokens), with what :data:`STORE_INPUTS` fetches for kinds that
    read the store (trained predictors need the trace's run ids, the empirical one an imported predictions file)."""
    fetch = STORE_INPUTS.get(type(spec.options))
    inputs = fetch(store, spec.options, trace) if fetch else {}
    return predictor_kind(spec.kind).for_trace(trace, spec.options, spec.seed, **inputs)
