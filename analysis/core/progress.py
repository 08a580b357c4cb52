"""The one progress-callback type of lenscope: ``on_progress(done, total, label)``.

Analyses, jobs, the CLI's bars and the app's progress bars all speak it.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], None]


def no_progress(done: int, total: int, label: str) -> None:
    """Default callback: report nothing."""
    return None
