"""Store failures a user can act on, each with a message that says what to do (the CLI and the app show the
message and no traceback)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, NoSuchModuleError, OperationalError, SQLAlchemyError

from lenscope.store.settings import sqlite_file

SERVER_NAMES = {"postgresql": "PostgreSQL", "mysql": "MySQL", "mariadb": "MariaDB"}
# A disk with less free space than this counts as full: a write that failed with an I/O error there ran out of it.
LOW_SPACE_BYTES = 16 << 20
# How databases say a write found the disk full (SQLite, PostgreSQL, MySQL; and the OS's own words).
FULL_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded", "disk full")


class StoreError(RuntimeError):
    """A store failure with a message for the user."""


class StoreUnavailableError(StoreError):
    """The database is locked by another writer for too long, cannot be reached, or cannot be written."""


class StoreReadOnlyError(StoreUnavailableError):
    """A write to a store opened read-only (its file or folder is not writable, or its URL says ``mode=ro``)."""


class StoreDiskFullError(StoreUnavailableError):
    """A write to the store failed because the disk holding it is full."""


class NotAStoreError(StoreError):
    """The database URL or file is not a lenscope store."""


class DatasetModelError(StoreError):
    """A collection into a dataset that holds runs of another model."""


class DamagedRunError(StoreError):
    """A run's tensor file was missing or damaged; the run is marked for regeneration."""


def _where(url: str) -> str:
    """HOST:PORT of a server URL (no credentials), or the URL without its password."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.host:
        return f"{parsed.host}:{parsed.port or 'default port'}"
    return parsed.render_as_string(hide_password=True)


def _backend(url: str) -> str:
    """The database kind of ``url`` (sqlite, postgresql, ...), empty for a malformed URL."""
    try:
        return make_url(url).get_backend_name()
    except ArgumentError:
        return ""


def free_bytes(folder: Path) -> int | None:
    """Free bytes on the disk holding ``folder`` (or its nearest existing parent), None when it cannot be asked."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def _free_text(free: int) -> str:
    return f"{free:,} bytes free" if free < 1 << 20 else f"{free / (1 << 20):.1f} MB free"


def low_space(folder: Path) -> str | None:
    """Why the disk holding ``folder`` counts as full (its free space), None when it has room or cannot be asked."""
    free = free_bytes(folder)
    return None if free is None or free >= LOW_SPACE_BYTES else _free_text(free)


def disk_full_message(where: Path | str, why: str) -> str:
    """The one message for a store whose disk is full: what, where, and what to do."""
    return f"the disk holding the store ({where}) is full ({why}); free some space and run it again"


def _disk_full(url: str, exc: SQLAlchemyError, reason: str, path: Path | None) -> StoreDiskFullError | None:
    """The error when ``exc`` is a write that found the disk full: the database says so (SQLite's "database or
    disk is full", ENOSPC), or it says "disk I/O error" (SQLite, growing its shared-memory file) on a disk with
    (nearly) no space left; None otherwise."""
    orig = getattr(exc, "orig", None)
    name = str(getattr(orig, "sqlite_errorname", ""))
    lowered = reason.lower()
    where = path.parent if path is not None else _where(url)
    full = (name.startswith("SQLITE_FULL") or any(text in lowered for text in FULL_TEXTS)
            or getattr(orig, "errno", None) in (errno.ENOSPC, errno.EDQUOT))
    if full:
        free = free_bytes(path.parent) if path is not None else None
        return StoreDiskFullError(disk_full_message(where, reason if free is None else f"{reason}; "
                                                    f"{_free_text(free)}"))
    if path is not None and (name.startswith("SQLITE_IOERR") or "disk i/o error" in lowered):
        left = low_space(path.parent)
        if left is not None:
            return StoreDiskFullError(disk_full_message(where, f"{reason}; {left}"))
    return None


def store_location(url: str) -> str:
    """Where a store is, for messages: the SQLite file's path, else the URL without its password."""
    path = sqlite_file(url)
    if path is not None:
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
    """The :class:`StoreError` for a database failure at ``url``: locked, on a full disk, unreachable, read-only,
    not a store, damaged, a malformed URL or a missing driver."""
    if isinstance(exc, (NoSuchModuleError, ImportError)):  # before ArgumentError, its parent class
        return NotAStoreError(f"no database driver for {_where(url)}: {exc}; install it (e.g. "
                              "`pip install psycopg2-binary` for PostgreSQL) or unset LENSCOPE_DB_URL")
    if isinstance(exc, ArgumentError):
        return NotAStoreError(f"{url!r} is not a database URL; set LENSCOPE_DB_URL to sqlite:///PATH or "
                              "postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or unset it for the local store)")
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    lowered = reason.lower()
    path = sqlite_file(url)
    if "locked" in lowered:
        return StoreUnavailableError(f"the store database is locked by another process for too long ({reason}); "
                                     "try again when the other job has finished")
    full = _disk_full(url, exc, reason, path)
    if full is not None:
        return full
    if "readonly" in lowered or "read-only" in lowered or (path is not None and _read_only(path)):
        where = path.parent if path is not None else _where(url)
        return StoreUnavailableError(f"the data directory {where} is read-only ({reason}); make it writable or "
                                     "point LENSCOPE_DATA_DIR at a writable directory")
    if path is not None and ("not a database" in lowered or "malformed" in lowered):
        return NotAStoreError(f"the database file {path} is not a lenscope store ({reason}); move it aside (a "
                              "new store is created in its place) or point LENSCOPE_DATA_DIR elsewhere")
    backend = _backend(url)
    if backend not in ("sqlite", "") and isinstance(exc, OperationalError):
        server = SERVER_NAMES.get(backend, backend)
        return StoreUnavailableError(f"{server} at {_where(url)} is not reachable "
                                     f"({reason}); start the server or fix LENSCOPE_DB_URL")
    if isinstance(exc, DatabaseError):
        return StoreUnavailableError(f"the store database is unavailable ({reason}); "
                                     "`python -m lenscope doctor` checks it")
    return StoreError(f"the store failed: {reason}")
