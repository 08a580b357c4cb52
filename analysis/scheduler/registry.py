"""The one registry of the simulator's choices: dispatch policies, queue policies (decode and prefill queues) and
predictors. The engine builds from it, and the CLI and the playground page list its names.

A predictor kind's entry (:class:`PredictorKind`) also carries the frozen dataclass of its own options (typed,
range-checked, each saying how a flag or a form asks for it, and the kind's label of a predictor made with them) and
the trace column it needs; callers ask the entry instead of branching on kind names. Kinds that read the store
(trained predictors, imported predictions files) register how their inputs are fetched one layer up
(:mod:`lenscope.jobs.scheduler.predictor_spec`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Generic, TypeVar

import numpy as np
import pandas as pd

from lenscope.analysis.scheduler.policies import (
    FCFS,
    SJF,
    SRPT,
    Dispatcher,
    LeastLoaded,
    PrefixAware,
    QueuePolicy,
    RandomDispatch,
    RoundRobin,
    ShortestPrompt,
)
from lenscope.analysis.scheduler.predictors import (
    ConstantPredictor,
    EmpiricalPredictor,
    NoisyOraclePredictor,
    Option,
    OraclePredictor,
    Predictor,
    PredictorOptions,
    StoredPredictor,
    TraceColumnPredictor,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One choice: how to build it, a short label, the trace column it needs (if any) and one line on what it is
    and where it comes from (``description``, for help texts and the UI; the label when empty)."""

    name: str
    build: Callable[..., T]
    label: str
    needs_column: str | None = None
    description: str = ""

    @classmethod
    def of(cls, kind: type, label: str, needs_column: str | None = None) -> Entry:
        """The entry of a policy class (or anything with a ``build``), under its ``name``."""
        return cls(kind.name, getattr(kind, "build", kind), label, needs_column, getattr(kind, "description", ""))

    def explain(self) -> str:
        """One line on what this choice is (its description, else its label)."""
        return self.description or self.label


@dataclass(frozen=True)
class PredictorKind(Entry[Predictor]):
    """A predictor kind: its class (``build(output_tokens, options, seed, **inputs)``), the dataclass of its own
    options (:class:`~lenscope.analysis.scheduler.predictors.PredictorOptions`) and the trace inputs it reads."""

    predictor: type[Predictor] = Predictor

    @classmethod
    def of(cls, kind: type[Predictor], label: str, needs_column: str | None = None) -> PredictorKind:
        return cls(kind.name, kind.build, label, needs_column, kind.description, kind)

    @property
    def options(self) -> type[PredictorOptions]:
        return self.predictor.Options

    def for_trace(self, trace: pd.DataFrame, options: PredictorOptions, seed: int = 0, **inputs) -> Predictor:
        """The predictor for ``trace`` (its true lengths and the columns the kind reads) with ``options``, ``seed``
        and the ``inputs`` fetched from elsewhere (the store)."""
        return self.build(trace["output_tokens"].to_numpy(), options, seed,
                          **self.predictor.trace_inputs(trace), **inputs)


class Registry(Generic[T]):
    """Named entries of one kind, in display order."""

    def __init__(self, kind: str, entries: list[Entry[T]]) -> None:
        self.kind = kind
        self._entries = {e.name: e for e in entries}

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def entry(self, name: str) -> Entry[T]:
        if name not in self._entries:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self._entries)}")
        return self._entries[name]

    def label(self, name: str) -> str:
        return self.entry(name).label

    def describe(self) -> str:
        """``name: description`` (else ``name: label``) of every entry, for help texts."""
        return "; ".join(f"{e.name}: {e.explain()}" for e in self._entries.values())

    def description(self, name: str) -> str:
        """One line on what entry ``name`` is and where it comes from (its label when it has no description)."""
        return self.entry(name).explain()

    def make(self, name: str, *args, **kwargs) -> T:
        return self.entry(name).build(*args, **kwargs)


DISPATCH_POLICIES: Registry[Dispatcher] = Registry("dispatch policy", [
    Entry.of(RoundRobin, "round robin"),
    Entry.of(RandomDispatch, "uniformly random (seeded)"),
    Entry.of(LeastLoaded, "least predicted outstanding tokens"),
    Entry.of(PrefixAware, "most of the prompt in the prefix cache (needs prefix caching)"),
])
QUEUE_POLICIES: Registry[QueuePolicy] = Registry("queue policy", [
    Entry.of(FCFS, "first come, first served"),
    Entry.of(SJF, "shortest predicted job first"),
    Entry.of(SRPT, "shortest predicted remaining length first"),
    Entry.of(ShortestPrompt, "shortest prompt first"),
])
# Decode progress is always 0 in a prefill queue, so SRPT would equal SJF there.
PREFILL_QUEUE_POLICIES: Registry[QueuePolicy] = Registry(
    "prefill queue policy", [QUEUE_POLICIES.entry(name) for name in ("fcfs", "spf", "sjf")])
PREDICTORS: Registry[Predictor] = Registry("predictor", [
    PredictorKind.of(OraclePredictor, "oracle"),
    PredictorKind.of(NoisyOraclePredictor, "oracle-noise"),
    PredictorKind.of(ConstantPredictor, "constant"),
    PredictorKind.of(StoredPredictor, "stored", needs_column="run_id"),
    PredictorKind.of(TraceColumnPredictor, "trace column", needs_column="predicted_tokens"),
    PredictorKind.of(EmpiricalPredictor, "empirical (upload predictions file)"),
])


def predictor_kind(name: str) -> PredictorKind:
    """The entry of predictor kind ``name`` (ValueError naming the kinds for an unknown one)."""
    return PREDICTORS.entry(name)  # type: ignore[return-value]


def predictor_options() -> dict[str, Option]:
    """Every option any predictor kind declares, by field name (one per name: kinds sharing a name share its
    :class:`Option`), in registry order: what the CLI adds flags for."""
    found: dict[str, Option] = {}
    for name in PREDICTORS.names():
        for field_name, option in predictor_kind(name).options.options():
            found.setdefault(field_name, option)
    return found


def kinds_taking(field_name: str) -> tuple[str, ...]:
    """The predictor kinds with an option ``field_name``."""
    return tuple(n for n in PREDICTORS.names() if predictor_kind(n).options.takes(field_name))


def dispatch_choices(prefix_cache: bool) -> tuple[str, ...]:
    """The dispatch policies a cluster can use (cache-aware dispatch needs prefix caching)."""
    return tuple(n for n in DISPATCH_POLICIES.names() if prefix_cache or not needs_prefix_cache(n))


def needs_prefix_cache(dispatch: str) -> bool:
    return DISPATCH_POLICIES.make(dispatch).needs_prefix_cache


def predictor_choices(columns) -> tuple[str, ...]:
    """The predictors a trace with these columns can feed (the stored one needs run ids, the trace column one the
    trace's predictions)."""
    return tuple(n for n in PREDICTORS.names() if PREDICTORS.entry(n).needs_column in (None, *columns))


def make_predictor(kind: str, output_tokens: np.ndarray, *, seed: int = 0, **options) -> Predictor:
    """Build predictor ``kind`` for a trace with true ``output_tokens``: ``options`` holds the kind's own options
    (fields of its options dataclass, range-checked) and the inputs its builder reads (others are ignored)."""
    entry = predictor_kind(kind)
    names = {f.name for f in fields(entry.options)}
    own = entry.options(**{k: v for k, v in options.items() if k in names})
    return entry.build(output_tokens, own, seed, **{k: v for k, v in options.items() if k not in names})
