"""Store failures a user can act on, each with a message that says what to do (the CLI and the app show the
message and no traceback)."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError, OperationalError, SQLAlchemyError

SERVER_NAMES = {"postgresql": "PostgreSQL", "mysql": "MySQL", "mariadb": "MariaDB"}


class StoreError(RuntimeError):
    """A store failure with a message for the user."""


class StoreUnavailableError(StoreError):
    """The database is locked by another writer for too long, cannot be reached, or cannot be written."""


class StoreReadOnlyError(StoreUnavailableError):
    """A write to a store opened read-only (its file or folder is not writable, or its URL says ``mode=ro``)."""


class NotAStoreError(StoreError):
    """The database URL or file is not a lenscope store."""


class DatasetModelError(StoreError):
    """A collection into a dataset that holds runs of another model."""


class DamagedRunError(StoreError):
    """A run's tensor file was missing or damaged; the run is marked for regeneration."""


def _sqlite_path(url: str) -> Path | None:
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def _where(url: str) -> str:
    """HOST:PORT of a server URL (no credentials), or the URL without its password."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.host:
        return f"{parsed.host}:{parsed.port or 'default port'}"
    return parsed.render_as_string(hide_password=True)


def store_location(url: str) -> str:
    """Where a store is, for messages: the SQLite file's path, else the URL without its password."""
    path = _sqlite_path(url)
    if path is not None and not str(path).startswith("file:"):
        return str(path)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def not_writable(path: Path) -> str | None:
    """Why this process cannot write the database file ``path`` (the file, or the folder SQLite keeps its
    journal in), or None when it can. Root ignores permission bits: ``os.access`` still says no on a read-only
    file system."""
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is not writable"
    if path.parent.exists() and not os.access(path.parent, os.W_OK):
        return "its folder is not writable"
    return None


def _read_only(path: Path) -> bool:
    """The database file or its directory cannot be written by this process."""
    return not_writable(path) is not None


def store_error(url: str, exc: SQLAlchemyError | ImportError) -> StoreError:
    """The :class:`StoreError` for a database failure at ``url``: locked, unreachable, read-only, not a store,
    damaged, a malformed URL or a missing driver."""
    if isinstance(exc, (NoSuchModuleError, ImportError)):  # before ArgumentError, its parent class
        return NotAStoreError(f"no database driver for {_where(url)}: {exc}; install it (e.g. "
                              "`pip install psycopg2-binary` for PostgreSQL) or unset LENSCOPE_DB_URL")
    if isinstance(exc, ArgumentError):
        return NotAStoreError(f"{url!r} is not a database URL; set LENSCOPE_DB_URL to sqlite:///PATH or "
                              "postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or unset it for the local store)")
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    lowered = reason.lower()
    path = _sqlite_path(url)
    if "locked" in lowered:
        return StoreUnavailableError(f"the store database is locked by another process for too long ({reason}); "
                                     "try again when the other job has finished")
    if "readonly" in lowered or "read-only" in lowered or (path is not None and _read_only(path)):
        where = path.parent if path is not None else _where(url)
        return StoreUnavailableError(f"the data directory {where} is read-only ({reason}); make it writable or "
                                     "point LENSCOPE_DATA_DIR at a writable directory")
    if path is not None and ("not a database" in lowered or "malformed" in lowered):
        return NotAStoreError(f"the database file {path} is not a lenscope store ({reason}); move it aside (a "
                              "new store is created in its place) or point LENSCOPE_DATA_DIR elsewhere")
    if path is None and isinstance(exc, OperationalError):
        server = SERVER_NAMES.get(make_url(url).get_backend_name(), make_url(url).get_backend_name())
        return StoreUnavailableError(f"{server} at {_where(url)} is not reachable "
                                     f"({reason}); start the server or fix LENSCOPE_DB_URL")
    if isinstance(exc, DatabaseError):
        return StoreUnavailableError(f"the store database is unavailable ({reason}); "
                                     "`python -m lenscope doctor` checks it")
    return StoreError(f"the store failed: {reason}")
