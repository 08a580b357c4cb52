"""The one registry of the simulator's choices: dispatch policies, queue policies (decode and prefill queues) and
predictors. The engine builds from it, and the CLI and the playground page list its names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

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
    OraclePredictor,
    Predictor,
    StoredPredictor,
    TraceColumnPredictor,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One choice: how to build it, a short label, and the trace column it needs (if any)."""

    name: str
    build: Callable[..., T]
    label: str
    needs_column: str | None = None

    @classmethod
    def of(cls, kind: type, label: str, needs_column: str | None = None) -> Entry:
        """The entry of a policy or predictor class, under its ``name`` (predictors build through ``build``)."""
        return cls(kind.name, getattr(kind, "build", kind), label, needs_column)


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
        """``name: label`` of every entry, for help texts."""
        return "; ".join(f"{e.name}: {e.label}" for e in self._entries.values())

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
    Entry.of(OraclePredictor, "oracle"),
    Entry.of(NoisyOraclePredictor, "oracle-noise"),
    Entry.of(ConstantPredictor, "constant"),
    Entry.of(StoredPredictor, "stored", needs_column="run_id"),
    Entry.of(TraceColumnPredictor, "trace column", needs_column="predicted_tokens"),
    Entry.of(EmpiricalPredictor, "empirical (upload predictions file)"),
])


def dispatch_choices(prefix_cache: bool) -> tuple[str, ...]:
    """The dispatch policies a cluster can use (cache-aware dispatch needs prefix caching)."""
    return tuple(n for n in DISPATCH_POLICIES.names() if prefix_cache or not needs_prefix_cache(n))


def needs_prefix_cache(dispatch: str) -> bool:
    return DISPATCH_POLICIES.make(dispatch).needs_prefix_cache


def predictor_choices(columns) -> tuple[str, ...]:
    """The predictors a trace with these columns can feed (the stored one needs run ids, the trace column one the
    trace's predictions)."""
    return tuple(n for n in PREDICTORS.names() if PREDICTORS.entry(n).needs_column in (None, *columns))


def make_predictor(kind: str, output_tokens: np.ndarray, **options) -> Predictor:
    """Build predictor ``kind`` for a trace with true ``output_tokens`` (options: see :mod:`~.predictors` builders)."""
    return PREDICTORS.make(kind, output_tokens, **options)
