"""Paths and URLs shared by the CLI, the jobs and the Streamlit app.

Everything is overridable through environment variables so that tests, CI and teams
(PostgreSQL via ``LENSCOPE_DB_URL``) can point the app somewhere else.

Where things are, in a repository checkout (an editable install included) and in an installed wheel:

- :data:`APP_ROOT` holds ``app.py``, ``pages/``, ``.streamlit/`` and the shipped ``data/`` (results, predictors,
  generations, traces): the repository root in a checkout, the copy the wheel bundles under
  ``lenscope/_bundle/`` when installed (see ``lenscope/_wheel_build.py``). Read-only for an installed copy.
- The data dir (the store: SQLite, tensors, trained artifacts; :func:`data_dir`) is ``LENSCOPE_DATA_DIR`` when
  set; else ``<repo>/cache/data`` in a checkout (where it has always been); else a per-user folder,
  ``$XDG_DATA_HOME/lenscope`` or ``~/.local/share/lenscope``. It is never inside an installed package: a store
  an older installed copy wrote at its default, ``<site-packages>/cache/data``, is moved to the
  per-user folder the first time it is looked for (:func:`adopt_legacy_store`).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.constants import HF_HUB_CACHE
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from lenscope.store.names import DATASET_NAME_RULE, shown

_PACKAGE = Path(__file__).resolve().parent  # cache/ in a checkout, <site-packages>/lenscope/store installed
#: A repository checkout (also an editable install, whose modules are the checkout's files) or an installed wheel.
CHECKOUT = _PACKAGE.name == "cache" and (_PACKAGE.parent / "pyproject.toml").is_file()
#: The folder of app.py, pages/, .streamlit/ and the shipped data/ (the one place that knows; see the docstring).
APP_ROOT = _PACKAGE.parent if CHECKOUT else _PACKAGE.parent / "_bundle"
#: The shipped data: data/results, data/predictors, data/generations, data/traces.
SHIPPED_DATA = APP_ROOT / "data"
#: Where an installed copy kept its store before the per-user default: ``<site-packages>/cache/data``, beside the
#: top-level ``cache`` package that older wheels installed (never used now).
LEGACY_INSTALLED_DATA_DIR = None if CHECKOUT else _PACKAGE.parent.parent / "cache" / "data"
GIB = 1 << 30
_REPORTED: set[Path] = set()  # old stores already named in a message (once per process)


def user_data_dir() -> Path:
    """The per-user data dir of an installed copy: ``$XDG_DATA_HOME/lenscope``, else ``~/.local/share/lenscope``."""
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg and Path(xdg).expanduser().is_absolute() else Path.home() / ".local" / "share"
    return base / "lenscope"


def adopt_legacy_store(legacy: Path, target: Path) -> None:
    """Move the store an older installed copy kept inside the package (``legacy``) to ``target``, once.

    Nothing happens when there is no store at ``legacy`` or when ``target`` exists already (then the old one is left
    where it is, named in a message, and not used). Moving (a rename, or a copy then a rename across file systems)
    keeps the data out of site-packages, where the next upgrade or uninstall would strand or delete it; a copy that
    cannot delete its source (a read-only site-packages) says so and leaves the source."""
    try:
        if not legacy.is_dir() or not any(legacy.iterdir()):
            return
    except OSError:
        return
    if target.exists():
        if legacy in _REPORTED:
            return
        _REPORTED.add(legacy)
        print(f"lenscope: an older store is left at {legacy} (inside the installed package, not used); the data "
              f"dir is {target}; set LENSCOPE_DATA_DIR={legacy} to use the old one", file=sys.stderr)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(legacy, target)
    except OSError:  # another file system, or a package folder we cannot write: copy, then swap in whole
        partial = target.with_name(f"{target.name}.moving-{os.getpid()}")
        shutil.copytree(legacy, partial, dirs_exist_ok=True)
        try:
            os.rename(partial, target)
        except OSError:  # a concurrent process moved it first
            shutil.rmtree(partial, ignore_errors=True)
            return
        shutil.rmtree(legacy, ignore_errors=True)
        if legacy.exists():
            print(f"lenscope: copied the store at {legacy} to {target}; the old copy could not be deleted",
                  file=sys.stderr)
            return
    print(f"lenscope: moved the store from {legacy} (inside the installed package) to {target}", file=sys.stderr)


def data_dir() -> Path:
    """The data dir: ``LENSCOPE_DATA_DIR``, else ``<repo>/cache/data`` in a checkout, else the per-user folder
    (where a store left inside the package by an older installed copy is moved first)."""
    configured = os.environ.get("LENSCOPE_DATA_DIR", "").strip()
    if configured:
        return Path(configured).expanduser()
    if CHECKOUT:
        return _PACKAGE / "data"
    target = user_data_dir()
    if LEGACY_INSTALLED_DATA_DIR is not None:
        adopt_legacy_store(LEGACY_INSTALLED_DATA_DIR, target)
    return target


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

    def artifact_path(self, group: str, name: str, suffix: str = "") -> Path:
        """Where the trained artifact ``name`` of ``group`` (egtp, drafters, probes, baselines) is kept: the one
        builder of such paths. ``name`` (a predictor name, ``:`` written as ``-``) becomes one file or folder name;
        the path is resolved and refused unless it lies inside the artifact folder of the data dir."""
        root = self.artifact_dir.resolve()
        path = (root / group / (name.replace(":", "-") + suffix)).resolve()  # '/', '..', links: all resolved here
        if path.parent != (root / group).resolve() or not path.is_relative_to(root):
            raise ValueError(f"artifact name {shown(name)} would be written outside the data folder {root}; "
                             f"a dataset name is {DATASET_NAME_RULE}")
        return path


def sqlite_url(path: Path) -> str:
    """The URL of the SQLite file ``path``: every character of the path is a path character (``?``, ``%``, ``#``,
    ``@``, spaces and any other are escaped, never read as URL syntax)."""
    return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)


def sqlite_file(url: str) -> Path | None:
    """The database file a SQLite URL names (its escapes decoded), else None: another database, one in memory, a
    ``file:`` URI (whose path SQLite reads itself) or a malformed URL."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


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
    """Read the settings from the environment: ``LENSCOPE_DATA_DIR`` (default: see :func:`data_dir`),
    ``LENSCOPE_DB_URL``,
    ``LENSCOPE_STARTER_SIZE`` (the study size the app's starter button runs, ``tiny`` in browser tests),
    ``LENSCOPE_ALLOWED_MODEL_ROOTS`` (``os.pathsep``-separated; default: the working directory, the data
    dir and the Hugging Face cache; empty: no local paths), ``LENSCOPE_MODEL_POOL_MODELS`` (default 2)
    and ``LENSCOPE_MODEL_POOL_GIB`` (default 4)."""
    data = data_dir()
    db_url = os.environ.get("LENSCOPE_DB_URL") or sqlite_url(data / "lenscope.db")  # the folder is a path, any text
    roots = os.environ.get("LENSCOPE_ALLOWED_MODEL_ROOTS")
    allowed = ([Path(r).expanduser() for r in roots.split(os.pathsep) if r.strip()] if roots is not None
               else [Path.cwd(), data, Path(HF_HUB_CACHE)])
    return Settings(data_dir=data, db_url=db_url,
                    starter_size=os.environ.get("LENSCOPE_STARTER_SIZE", "starter"),
                    allowed_model_roots=tuple(r.resolve() for r in allowed),
                    model_pool_models=int(_positive("LENSCOPE_MODEL_POOL_MODELS", 2, int)),
                    model_pool_bytes=int(_positive("LENSCOPE_MODEL_POOL_GIB", 4) * GIB))
