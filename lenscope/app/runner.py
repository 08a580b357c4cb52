"""Running lenscope jobs under Streamlit progress bars (rate and ETA), user errors shown instead of raised."""

from __future__ import annotations

import time

import streamlit as st

from analysis.core.progress import Progress


def progress_callback(bar, label: str = "") -> Progress:
    """``on_progress(done, total[, label])`` for lenscope jobs, drawing into an ``st.progress`` bar with the
    rate (per second) and an ETA measured since the first call."""
    started = time.perf_counter()

    def update(done: int, total: int, phase: str = "") -> None:
        text = " · ".join(part for part in (label, phase) if part)
        elapsed = time.perf_counter() - started
        rate = f" · {done / elapsed:.1f}/s" if done and elapsed > 0.5 else ""
        eta = f" · ETA {elapsed / done * (total - done):.0f} s" if rate and done < total else ""
        bar.progress(min(done / max(total, 1), 1.0), text=f"{text}: {done}/{total}{rate}{eta}")

    return update


def run_job(job, start: str = "starting"):
    """Run ``job(on_progress)`` under an ``st.progress`` bar; a user error is shown, not raised.

    Returns the job's result, or None after showing the error.
    """
    bar = st.progress(0.0, text=start)
    try:
        return job(progress_callback(bar))
    except (ValueError, FileNotFoundError) as exc:
        st.error(str(exc))
        return None
