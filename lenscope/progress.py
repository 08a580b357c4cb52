"""The progress-callback contract of lenscope jobs: ``on_progress(done, total, label)``."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], None]


def no_progress(done: int, total: int, label: str) -> None:
    """Default callback: report nothing."""
    return None
