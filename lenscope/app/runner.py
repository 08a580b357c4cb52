"""Running lenscope jobs under Streamlit progress bars (rate and ETA), and the app's error boundary: a failure
the user can act on shows its message, any other a short notice, its traceback only in the server log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from lenscope.analysis.core.progress import PhaseClock, Progress
from lenscope.errors import user_message

log = logging.getLogger(__name__)
DEFECT_NOTICE = "Something went wrong on the server (its log has the details); the store is unchanged."


def failure_text(exc: Exception) -> str:
    """What the page says about ``exc``: its message (:func:`lenscope.errors.user_message`), or for a defect
    a short notice, with the traceback written to the server log."""
    message = user_message(exc)
    if message is None:
        log.error("unexpected error", exc_info=exc)
        return DEFECT_NOTICE
    return message


@contextmanager
def error_boundary(where=st) -> Iterator[None]:
    """Show any failure inside as :func:`failure_text` (in ``where``: the page or ``st.sidebar``) and stop
    the page's script there."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing reaches the browser as a traceback
        where.error(failure_text(exc))
        st.stop()


def progress_callback(bar, label: str = "") -> Progress:
    """``on_progress(done, total[, label])`` for lenscope jobs, drawing into an ``st.progress`` bar with the
    rate (per second) and an ETA of the current phase."""
    clock = PhaseClock()

    def update(done: int, total: int, phase: str = "") -> None:
        clock.update(done, phase)
        text = " · ".join(part for part in (label, phase) if part)
        rate, eta = clock.rate(done), clock.eta(done, total)
        rate_text = f" · {rate:.1f}/s" if rate else ""
        eta_text = f" · ETA {eta:.0f} s" if eta is not None else ""
        bar.progress(min(done / max(total, 1), 1.0), text=f"{text}: {done}/{total}{rate_text}{eta_text}")

    return update


def run_job(job, start: str = "starting"):
    """Run ``job(on_progress)`` under an ``st.progress`` bar; a failure is shown (:func:`failure_text`), not
    raised.

    Returns the job's result, or None after showing the error.
    """
    bar = st.progress(0.0, text=start)
    try:
        return job(progress_callback(bar))
    except Exception as exc:  # noqa: BLE001 - shown on the page, its traceback (for a defect) in the log
        st.error(failure_text(exc))
        return None
