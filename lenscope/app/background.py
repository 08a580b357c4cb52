"""Jobs that outlive a browser session: one registry per server process, so a reload (or another tab) finds
the job still running and reattaches to its progress instead of starting it again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import streamlit as st

from lenscope.analysis.core.progress import PhaseClock, Progress
from lenscope.app.runner import failure_text


@dataclass
class BackgroundJob:
    """A job running in a server thread: its latest progress, and its result or error once it ended."""

    name: str
    done: int = 0
    total: int = 0
    label: str = "starting"
    started: float = field(default_factory=time.time)
    clock: PhaseClock = field(default_factory=PhaseClock)
    ended: float | None = None
    error: str | None = None
    result: object = None

    @property
    def running(self) -> bool:
        return self.ended is None

    def on_progress(self, done: int, total: int, label: str = "") -> None:
        self.clock.update(done, label)
        self.done, self.total, self.label = done, total, label

    def status_text(self) -> str:
        """``label: done/total · ETA of this phase · elapsed``, or how it ended."""
        elapsed = (self.ended or time.time()) - self.started
        if self.error:
            return f"failed after {elapsed:.0f} s: {self.error}"
        if not self.running:
            return f"finished in {elapsed:.0f} s"
        eta = self.clock.eta(self.done, self.total)
        eta_text = f" · ETA {eta:.0f} s" if eta is not None else ""
        return f"{self.label}: {self.done}/{self.total}{eta_text} · {elapsed:.0f} s so far"


@st.cache_resource(show_spinner=False)
def _registry() -> tuple[dict[str, BackgroundJob], threading.Lock]:
    return {}, threading.Lock()


def get_job(name: str) -> BackgroundJob | None:
    """The job of this name started in this server process (running or ended), if any."""
    return _registry()[0].get(name)


def start_job(name: str, job: Callable[[Progress], object]) -> BackgroundJob:
    """Run ``job(on_progress)`` in a daemon thread unless a job of this name is running already (then that
    one is returned). Errors end the job with their message (:func:`failure_text`: a defect's traceback goes
    to the server log)."""
    jobs, lock = _registry()
    with lock:
        current = jobs.get(name)
        if current is not None and current.running:
            return current
        entry = jobs[name] = BackgroundJob(name)

    def target() -> None:
        try:
            entry.result = job(entry.on_progress)
        except Exception as exc:  # noqa: BLE001 - shown on the page, never raised into Streamlit
            entry.error = failure_text(exc)
        finally:
            entry.ended = time.time()

    threading.Thread(target=target, name=f"lenscope-{name}", daemon=True).start()
    return entry


def show_job(name: str, every_s: float = 2.0) -> None:
    """How job ``name`` stands: a progress bar that refreshes itself while it runs and reruns the whole page
    when it ends (so the page shows the new results), else how it ended. Nothing when it never ran."""
    job = get_job(name)
    if job is None:
        return
    if not job.running:
        (st.error if job.error else st.success)(job.status_text())
        return

    @st.fragment(run_every=every_s)
    def panel() -> None:
        if not job.running:
            st.rerun()
        st.progress(min(job.done / max(job.total, 1), 1.0), text=job.status_text())

    panel()
