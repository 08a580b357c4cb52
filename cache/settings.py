"""Paths and URLs shared by the CLI, the jobs and the Streamlit app.

Everything is overridable through environment variables so that tests, CI and teams
(PostgreSQL via ``LENSCOPE_DB_URL``) can point the app somewhere else.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.constants import HF_HUB_CACHE

REPO_ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30


@dataclass(frozen=True)
class Settings:
    """Resolved locations of the store and of trained artifacts, and the app's limits on models."""

    data_dir: Path
    db_url: str
    starter_size: str = "starter"
    # Local model paths the browser may load (the CLI loads any path).
    allowed_model_roots: tuple[Path, ...] = ()
    # The app keeps at most this many loaded models, of at most this many bytes of weights together.
    model_pool_models: int = 2
    model_pool_bytes: int = 4 * GIB

    @property
    def tensor_dir(self) -> Path:
        return self.data_dir / "tensors"

    @property
    def artifact_dir(self) -> Path:
        return self.data_dir / "artifacts"


def _positive(name: str, default: float, kind: type[int] | type[float] = float) -> float:
    """The positive number in environment variable ``name`` (``default`` when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    try:
        value = kind(raw) if raw else default
    except ValueError:
        value = 0
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive {kind.__name__}, not {raw!r}")
    return value


def get_settings() -> Settings:
    """Read the settings from the environment: ``LENSCOPE_DATA_DIR``, ``LENSCOPE_DB_URL``,
    ``LENSCOPE_STARTER_SIZE`` (the study size the app's starter button runs, ``tiny`` in browser tests),
    ``LENSCOPE_ALLOWED_MODEL_ROOTS`` (``os.pathsep``-separated; default: the working directory, the data
    dir and the Hugging Face cache; empty: no local paths), ``LENSCOPE_MODEL_POOL_MODELS`` (default 2)
    and ``LENSCOPE_MODEL_POOL_GIB`` (default 4)."""
    data_dir = Path(os.environ.get("LENSCOPE_DATA_DIR", REPO_ROOT / "cache" / "data")).expanduser()
    db_url = os.environ.get("LENSCOPE_DB_URL") or f"sqlite:///{data_dir / 'lenscope.db'}"
    roots = os.environ.get("LENSCOPE_ALLOWED_MODEL_ROOTS")
    allowed = ([Path(r).expanduser() for r in roots.split(os.pathsep) if r.strip()] if roots is not None
               else [Path.cwd(), data_dir, Path(HF_HUB_CACHE)])
    return Settings(data_dir=data_dir, db_url=db_url,
                    starter_size=os.environ.get("LENSCOPE_STARTER_SIZE", "starter"),
                    allowed_model_roots=tuple(r.resolve() for r in allowed),
                    model_pool_models=int(_positive("LENSCOPE_MODEL_POOL_MODELS", 2, int)),
                    model_pool_bytes=int(_positive("LENSCOPE_MODEL_POOL_GIB", 4) * GIB))
