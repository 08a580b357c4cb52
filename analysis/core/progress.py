"""The one progress-callback type of lenscope: ``on_progress(done, total, label)``.

Analyses, jobs, the CLI's bars and the app's progress bars all speak it. A label names a phase (a job wrapping
another joins their labels with `` · ``, e.g. ``step 4/11: attribution evidence · training the attention head``)
and may end with live details after `` | `` (e.g. ``step 1/9: collect ... · sampling | 120 tok/s``). A phase
counts in its own units, so bars, rates and ETAs restart when it changes, never when only its details do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Progress = Callable[[int, int, str], None]
DETAIL_SEPARATOR = " | "


def with_details(phase: str, details: str) -> str:
    """A label for ``phase`` carrying live ``details`` (a rate, a loss) that do not start a new phase."""
    return f"{phase}{DETAIL_SEPARATOR}{details}"


def label_phase(label: str) -> str:
    """The phase a progress label reports on: the label without its live details."""
    return label.split(DETAIL_SEPARATOR)[0]


@dataclass
class PhaseClock:
    """Rate and ETA of the current phase of a progress stream, measured from the phase's first report."""

    phase: str | None = None
    started: float = 0.0
    first_done: int = 0

    def update(self, done: int, label: str) -> None:
        """Note a report; a new phase restarts the clock."""
        phase = label_phase(label)
        if phase != self.phase:
            self.phase, self.started, self.first_done = phase, time.monotonic(), done

    def rate(self, done: int) -> float | None:
        """Items per second in this phase (None before it has measured any)."""
        elapsed = time.monotonic() - self.started
        return (done - self.first_done) / elapsed if done > self.first_done and elapsed > 0.5 else None

    def eta(self, done: int, total: int) -> float | None:
        """Seconds left in this phase at its rate so far (None when unknown or done)."""
        rate = self.rate(done)
        return (total - done) / rate if rate and done < total else None


def no_progress(done: int, total: int, label: str) -> None:
    """Default callback: report nothing."""
    return None
