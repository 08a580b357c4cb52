"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def call_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Wall times of ``repeats`` calls of ``fn`` in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in seconds over ``repeats`` calls, after ``warmup`` untimed calls."""
    return statistics.median(call_seconds(fn, repeats, warmup))


def fastest_seconds(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """The fastest of ``repeats`` calls after ``warmup``: what a machine can do at best, for a ceiling."""
    return min(call_seconds(fn, repeats, warmup))
