"""Paths and URLs shared by the CLI, the jobs and the Streamlit app.

Everything is overridable through environment variables so that tests, CI and teams
(PostgreSQL via ``LENSCOPE_DB_URL``) can point the app somewhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    """Resolved locations of the store and of trained artifacts."""

    data_dir: Path
    db_url: str
    starter_size: str = "starter"

    @property
    def tensor_dir(self) -> Path:
        return self.data_dir / "tensors"

    @property
    def artifact_dir(self) -> Path:
        return self.data_dir / "artifacts"


def get_settings() -> Settings:
    """Read the settings from the environment (``LENSCOPE_DATA_DIR``, ``LENSCOPE_DB_URL``, and
    ``LENSCOPE_STARTER_SIZE``: the study size the app's starter button runs, ``tiny`` in browser tests)."""
    data_dir = Path(os.environ.get("LENSCOPE_DATA_DIR", REPO_ROOT / "cache" / "data")).expanduser()
    db_url = os.environ.get("LENSCOPE_DB_URL") or f"sqlite:///{data_dir / 'lenscope.db'}"
    return Settings(data_dir=data_dir, db_url=db_url,
                    starter_size=os.environ.get("LENSCOPE_STARTER_SIZE", "starter"))
