"""The app's bounded pool of loaded models: least recently used out first, by count and by memory; a failed
load is remembered for a while, so that a rerun does not wait for it again. No Streamlit here."""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from lenscope.store.settings import GIB

T = TypeVar("T")
FAILURE_TTL_S = 300.0
_MISSING = object()


class ModelPool(Generic[T]):
    """At most ``max_models`` values taking at most ``max_bytes`` together (``size_of`` each), shared by threads
    (Streamlit sessions). Loads run one at a time: two sessions asking for one model load it once."""

    def __init__(self, max_models: int, max_bytes: int, size_of: Callable[[T], int],
                 failure_ttl_s: float = FAILURE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_models, self.max_bytes = max_models, max_bytes
        self._size_of, self._failure_ttl_s, self._clock = size_of, failure_ttl_s, clock
        self._entries: OrderedDict[Hashable, tuple[T, int]] = OrderedDict()
        self._failures: dict[Hashable, tuple[float, Exception]] = {}
        self._lock = threading.Lock()  # guards the two dicts
        self._load_lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The value of ``key``, from ``load()`` on a miss, then kept while it is among the most recently used
        that fit; a value larger than the whole budget is refused. A load that failed less than
        ``failure_ttl_s`` ago raises its error again without calling ``load``."""
        value = self._held(key)
        if value is not _MISSING:
            return value
        with self._load_lock:
            value = self._held(key)  # loaded by another session while this one waited
            if value is not _MISSING:
                return value
            try:
                value = load()
                size = self._size_of(value)
                if size > self.max_bytes:
                    raise ValueError(f"the model takes {size / GIB:.1f} GiB, more than the app keeps loaded "
                                     f"({self.max_bytes / GIB:.1f} GiB; LENSCOPE_MODEL_POOL_GIB raises it)")
            except Exception as exc:
                self._remember_failure(key, exc)
                raise
            with self._lock:
                self._entries[key] = (value, size)
                while len(self._entries) > self.max_models or self._bytes() > self.max_bytes:
                    self._entries.popitem(last=False)
            return value

    def _held(self, key: Hashable) -> T | object:
        """The value of ``key`` (now the most recently used), its recent failure raised, or ``_MISSING``."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
            failed = self._failures.get(key)
            if failed is not None and self._clock() - failed[0] < self._failure_ttl_s:
                raise copy.copy(failed[1])  # a fresh copy: re-raising one object would grow its traceback
            return _MISSING

    def _remember_failure(self, key: Hashable, exc: Exception) -> None:
        """Keep a copy of ``exc`` without its traceback (which holds the failed load's frames); forget expired
        failures."""
        try:
            bare = copy.copy(exc)
        except Exception:  # a type that cannot be rebuilt from its args
            bare = RuntimeError(str(exc))
        now = self._clock()
        with self._lock:
            self._failures = {k: f for k, f in self._failures.items() if now - f[0] < self._failure_ttl_s}
            self._failures[key] = (now, bare)

    def _bytes(self) -> int:
        return sum(size for _, size in self._entries.values())
