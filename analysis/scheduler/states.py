"""Request life cycle and event types of the serving simulator.

Every request moves through :class:`RequestState` along the edges of :data:`TRANSITIONS`::

    WAITING -> PREFILLING -> DECODING -> DONE                      (colocated)
    WAITING -> PREFILLING -> TRANSFERRING -> WAITING -> DECODING   (disaggregated: KV shipped to a decode instance)
    DECODING -> PREEMPTED -> PREFILLING                            (KV dropped, recomputed on re-admission)
    PREFILLING -> DONE                                             (a one-token output ends with its prefill)

:class:`RequestStates` holds the state of every request in one array and raises :class:`IllegalTransition` on any
other move. The engine's event queue orders :class:`Event` tuples by time (ties: push order); preemptions and
completions are state transitions at iteration ends, not events of their own.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np


class RequestState(IntEnum):
    WAITING = 0  # in a prefill or decode instance's wait queue (the initial state)
    PREFILLING = 1  # in a prefill batch or chunked prefill
    TRANSFERRING = 2  # KV cache on its way from a prefill to a decode instance
    DECODING = 3  # in a running decode batch
    PREEMPTED = 4  # KV cache dropped, back in a wait queue for recomputation
    DONE = 5  # all output tokens generated


S = RequestState
TRANSITIONS: dict[RequestState, tuple[RequestState, ...]] = {
    S.WAITING: (S.PREFILLING, S.DECODING),  # decoding directly when its KV cache was transferred
    S.PREFILLING: (S.TRANSFERRING, S.DECODING, S.DONE),
    S.TRANSFERRING: (S.WAITING,),
    S.DECODING: (S.PREEMPTED, S.DONE),
    S.PREEMPTED: (S.PREFILLING,),
    S.DONE: (),
}
# _ALLOWED_TO[src]: bit mask of the states ``src`` may move to (a table lookup and a shift per check)
_ALLOWED_TO: tuple[int, ...] = tuple(sum(1 << dst for dst in TRANSITIONS[src]) for src in S)

class EventType(IntEnum):
    ARRIVAL = 0  # target: request id
    ITERATION_DONE = 1  # an instance's iteration or decode segment ends; target: instance uid, arg: its version
    TRANSFER_DONE = 2  # a request's KV cache reached its decode instance; target: request id, arg: decode index


class Event(NamedTuple):
    """An entry of the engine's event queue (ordered by ``time``, then ``seq``)."""

    time: float
    seq: int
    kind: EventType
    target: int
    arg: int


class IllegalTransition(RuntimeError):
    """A request was moved along an edge that :data:`TRANSITIONS` does not have."""


class RequestStates:
    """The state of every request of a simulation (a list, cheap to read and write one request at a time);
    ``history`` (when kept) lists every (request, from, to) move."""

    def __init__(self, n: int, keep_history: bool = False) -> None:
        self.state: list[RequestState] = [S.WAITING] * n
        self.history: list[tuple[int, RequestState, RequestState]] | None = [] if keep_history else None

    def move(self, i: int, to: RequestState) -> None:
        """Move request ``i`` to ``to``."""
        src = self.state[i]
        if not _ALLOWED_TO[src] >> to & 1:
            raise IllegalTransition(f"request {i}: {src.name} -> {to.name}")
        self.state[i] = to
        if self.history is not None:
            self.history.append((int(i), src, to))

    def move_all(self, idx: np.ndarray | list[int], to: RequestState) -> None:
        """Move requests ``idx`` (integers) to ``to``: all of them, or none when one move is illegal."""
        ids = idx.tolist() if isinstance(idx, np.ndarray) else idx
        state, bit = self.state, 1 << to
        for i in ids:
            if not _ALLOWED_TO[state[i]] & bit:
                raise IllegalTransition(f"request {i}: {state[i].name} -> {to.name}")
        if self.history is not None:
            self.history.extend((i, state[i], to) for i in ids)
        for i in ids:
            state[i] = to

    def counts(self) -> dict[RequestState, int]:
        """Requests in each state."""
        found = np.bincount(np.asarray(self.state, dtype=np.int64), minlength=len(S))
        return {s: int(found[s]) for s in S}
