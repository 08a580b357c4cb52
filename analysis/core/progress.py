"""The one progress-callback type of lenscope: ``on_progress(done, total, label)``.

Analyses, jobs, the CLI's bars and the app's progress bars all speak it. A label may carry live details after
its phase, e.g. ``step 1/9: collect ... · 120 tok/s``: bars and ETAs follow the phase (the text before the
first `` · ``), so a changing rate does not restart them.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], None]
DETAIL_SEPARATOR = " · "


def label_phase(label: str) -> str:
    """The phase a progress label reports on: the label without its live details."""
    return label.split(DETAIL_SEPARATOR)[0]


def no_progress(done: int, total: int, label: str) -> None:
    """Default callback: report nothing."""
    return None
