"""Dispatch and queue policies. They see predictions only, never true output lengths.

The engine hands policies :class:`RequestView` and :class:`InstanceView` objects: immutable
snapshots holding what a real scheduler could know (arrival, prompt length, tokens generated so
far, predicted lengths). The true output length exists only inside the engine.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestView:
    """What a policy may know about a request."""

    rid: int
    arrival_s: float
    prompt_tokens: int
    generated: int
    predicted_total: float
    predicted_remaining: float


@dataclass(frozen=True, slots=True)
class InstanceView:
    """What a dispatcher may know about a decode instance."""

    index: int
    queued: int
    running: int
    predicted_outstanding_tokens: float
    cached_tokens: int = 0  # prompt tokens of the request being dispatched in the instance's prefix cache


class Dispatcher(ABC):
    """Chooses the decode instance of a request."""

    name = "dispatch"
    needs_prefix_cache = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed  # for dispatchers that draw at random

    @abstractmethod
    def choose(self, request: RequestView, instances: Sequence[InstanceView]) -> int:
        """Index of the chosen instance."""


class RoundRobin(Dispatcher):
    name = "rr"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._next = 0

    def choose(self, request: RequestView, instances: Sequence[InstanceView]) -> int:
        index = self._next % len(instances)
        self._next += 1
        return index


class RandomDispatch(Dispatcher):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._rng = np.random.default_rng(seed)

    def choose(self, request: RequestView, instances: Sequence[InstanceView]) -> int:
        return int(self._rng.integers(len(instances)))


_LOAD_THEN_INDEX = attrgetter("predicted_outstanding_tokens", "index")


class LeastLoaded(Dispatcher):
    """The instance with the fewest predicted outstanding tokens (ties: lowest index)."""

    name = "lb"

    def choose(self, request: RequestView, instances: Sequence[InstanceView]) -> int:
        return min(instances, key=_LOAD_THEN_INDEX).index


class QueuePolicy(ABC):
    """Orders waiting requests: the smallest key is admitted first (ties: enqueue order).

    The same key picks preemption victims: the running request with the largest key goes first.
    """

    name = "queue"

    @abstractmethod
    def key(self, request: RequestView) -> float:
        """Priority key (lower is served first)."""


class FCFS(QueuePolicy):
    name = "fcfs"

    def key(self, request: RequestView) -> float:
        return request.arrival_s


class SJF(QueuePolicy):
    """Shortest predicted total length first (static prediction)."""

    name = "sjf"

    def key(self, request: RequestView) -> float:
        return request.predicted_total


class ShortestPrompt(QueuePolicy):
    """Shortest prompt first (no prediction needed: the prefill cost is known on arrival)."""

    name = "spf"

    def key(self, request: RequestView) -> float:
        return request.prompt_tokens


class SRPT(QueuePolicy):
    """Shortest predicted remaining length first (uses PLP updates as tokens are generated)."""

    name = "srpt"

    def key(self, request: RequestView) -> float:
        return request.predicted_remaining


class PrefixAware(LeastLoaded):
    """Cache-aware: the instance whose prefix cache holds the most of the request's prompt (ties: least loaded)."""

    name = "prefix"
    needs_prefix_cache = True

    def choose(self, request: RequestView, instances: Sequence[InstanceView]) -> int:
        return min(instances, key=lambda v: (-v.cached_tokens, v.predicted_outstanding_tokens, v.index)).index


class WaitQueue:
    """Waiting requests ordered by a policy, with an optional aging guard against starvation.

    With ``aging_s`` set, a request that has waited ``aging_s`` seconds since its arrival is served
    before any policy choice (oldest first), so no request starves behind a stream of shorter ones.
    """

    def __init__(self, policy: QueuePolicy, aging_s: float | None = None) -> None:
        self.policy, self.aging_s = policy, aging_s
        self._heap: list[tuple[float, int, int]] = []
        self._fifo: deque[tuple[float, int, int]] = deque()
        self._alive: set[int] = set()
        self._seq = 0

    def __len__(self) -> int:
        return len(self._alive)

    def push(self, view: RequestView) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.policy.key(view), self._seq, view.rid))
        if self.aging_s is not None:
            self._fifo.append((view.arrival_s, self._seq, view.rid))
        self._alive.add(self._seq)

    def _top(self, items) -> tuple[float, int, int]:
        while items[0][1] not in self._alive:
            if isinstance(items, deque):
                items.popleft()
            else:
                heapq.heappop(items)
        return items[0]

    def _choice(self, now: float) -> tuple[float, int, int]:
        if self.aging_s is not None:
            oldest = self._top(self._fifo)
            if now - oldest[0] >= self.aging_s:
                return oldest
        return self._top(self._heap)

    def peek(self, now: float) -> int:
        """Request id that would be served next."""
        return self._choice(now)[2]

    def pop(self, now: float) -> int:
        """Remove and return the request served next."""
        _, seq, rid = self._choice(now)
        self._alive.discard(seq)
        return rid
