"""AppTest helpers: open app.py or a page by its path relative to the repository root."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent


def open_page(relative: str, timeout: float = 180) -> AppTest:
    """An AppTest for ``relative`` (e.g. ``"pages/1_Token_entropy.py"``), not yet run."""
    return AppTest.from_file(str(REPO / relative), default_timeout=timeout)
