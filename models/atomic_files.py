"""Files written all or nothing: a temporary file in the same folder, flushed to disk, then renamed into place.

Every file lenscope writes for a user (CSV, Parquet, JSON, HTML, safetensors, reports) goes through here, so a
kill, a full disk or a crash leaves either the previous file or the new one, never a file cut short; two writers to
one name leave one whole file (the last rename wins). The temporary name ends with the final name
(``.NAME.tmp-TOKEN-NAME`` kept hidden), so a writer that infers a format from the suffix (``.csv.gz``) sees it. A
failure removes the temporary file; a full disk raises ``OSError(ENOSPC)`` naming the final path.

Lowest layer (models): the store, analyses and jobs all import it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

TEMP_MARK = ".tmp-"


def _temporary_beside(path: Path) -> Path:
    """A new empty file in ``path``'s folder (created exclusively, with the permissions the umask gives)."""
    while True:
        candidate = path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(4)}-{path.name}")
        try:
            os.close(os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return candidate
        except FileExistsError:
            continue


def _sync(path: Path) -> None:
    """Flush ``path``'s data (and, where the platform allows, its folder's entry) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system (or platform) lets a folder be opened and synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def disk_full(path: Path) -> OSError:
    """The error for a write to ``path`` that ran out of space: it says the disk is full and where."""
    return OSError(errno.ENOSPC, f"no space left on the disk holding {path.parent}", str(path))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that takes a file name (pandas, pyarrow, safetensors, plotly);
    when the block ends without error the file is flushed to disk and renamed to ``path``, else it is removed."""
    final = Path(path)
    temporary = _temporary_beside(final)
    try:
        yield temporary
        _sync(temporary)
        os.replace(temporary, final)
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise disk_full(final) from exc
        raise
    _sync_folder(final.parent)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """``open(path, mode)`` on a temporary file that replaces ``path`` whole when the block ends without error."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open writes a new file (mode 'w' or 'wb'), not mode {mode!r}")
    with atomic_path(path) as temporary, open(temporary, mode, **kwargs) as handle:
        yield handle


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """``Path(path).write_text(text)``, all or nothing."""
    with atomic_open(path, "w", encoding=encoding) as handle:
        handle.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """``Path(path).write_bytes(data)``, all or nothing."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def is_temporary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a temporary file of :func:`atomic_path` (left only by a process killed mid-write)."""
    name = Path(path).name
    return name.startswith(".") and TEMP_MARK in name
