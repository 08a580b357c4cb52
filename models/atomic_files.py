"""Files written all or nothing: a temporary file in the same folder, flushed to disk, then renamed into place.

Every file lenscope writes for a user (CSV, Parquet, JSON, HTML, safetensors, reports) goes through here, so a
kill, a full disk or a crash leaves either the previous file or the new one, never a file cut short; two writers to
one name leave one whole file (the last rename wins). The temporary name is hidden and ends with the final name's
suffixes (``.NAME.tmp-TOKEN.csv.gz``), so a writer that infers a format from the suffix (``.csv.gz``, ``.png``) sees
it. A new file gets the permissions the umask gives, a replaced one keeps its own. A failure removes the temporary
file; a full disk (or quota) raises ``OSError(ENOSPC)`` naming the final path.

Lowest layer (models): the store, analyses and jobs all import it.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

TEMP_MARK = ".tmp-"
NAME_MAX = 255  # bytes in a file name on common file systems
SUFFIX_CHARS = 32  # at most this much of the final name's suffixes ends a temporary name
_TEMPORARY = re.compile(r"\..*\.tmp-[0-9a-f]{8}(\..*)?", re.DOTALL)
# How writers that are not plain Python (safetensors' Rust, Arrow) say the disk is full.
_OUT_OF_SPACE_TEXT = ("no space left on device", "disk quota exceeded", "os error 28", "os error 122")


def _temporary_name(name: str) -> str:
    """``.NAME.tmp-TOKEN.SUFFIXES``, within :data:`NAME_MAX` bytes (NAME shortened when it must be)."""
    tail = f"{TEMP_MARK}{secrets.token_hex(4)}{''.join(Path(name).suffixes)[-SUFFIX_CHARS:]}"
    head = name.encode()[:max(NAME_MAX - 1 - len(tail.encode()), 0)].decode(errors="ignore")
    return f".{head}{tail}"


def _temporary_beside(path: Path) -> Path:
    """A new empty file in ``path``'s folder (created exclusively, with the permissions the umask gives)."""
    while True:
        candidate = path.with_name(_temporary_name(path.name))
        try:
            os.close(os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return candidate
        except FileExistsError:
            continue


def _keep_mode(temporary: Path, final: Path) -> None:
    """Give ``temporary`` the permission bits of the file it replaces (as writing that file in place would)."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(temporary, stat.S_IMODE(os.stat(final).st_mode))


def _sync(path: Path) -> None:
    """Flush ``path``'s data (a file's bytes, a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    """Flush ``folder``'s entries (the rename) to the disk, where the platform lets a folder be opened."""
    with contextlib.suppress(OSError):
        _sync(folder)


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full, whichever library raised it."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(text in str(exc).lower() for text in _OUT_OF_SPACE_TEXT)


def disk_full(path: Path) -> OSError:
    """The error for a write to ``path`` that ran out of space: it says the disk is full and where."""
    return OSError(errno.ENOSPC, f"no space left on the disk holding {Path(path).parent}", str(path))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that takes a file name (pandas, pyarrow, safetensors, plotly);
    when the block ends without error the file is flushed to disk and renamed to ``path``, else it is removed. A
    symbolic link is written through, as ``open`` does: its target is replaced, the link stays."""
    final = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    try:
        temporary = _temporary_beside(final)
    except OSError as exc:  # the folder is missing, not writable or full: said of the file asked for
        if out_of_space(exc):
            raise disk_full(final) from exc
        if exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(final)) from exc
    try:
        yield temporary
        _keep_mode(temporary, final)
        _sync(temporary)
        os.replace(temporary, final)
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if out_of_space(exc):
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


@contextlib.contextmanager
def atomic_gzip(path: str | os.PathLike, mode: str = "wb", mtime: float | None = None,
                encoding: str = "utf-8") -> Iterator[IO]:
    """``gzip.open(path, mode)`` (``wb`` or ``wt``), all or nothing; the gzip header names ``path``, not the
    temporary file, so the bytes are those a direct write gives (``mtime=0``: the same bytes every time)."""
    if mode not in ("wb", "wt"):
        raise ValueError(f"atomic_gzip writes a new file (mode 'wb' or 'wt'), not mode {mode!r}")
    with atomic_open(path, "wb") as raw, gzip.GzipFile(os.fspath(path), "wb", fileobj=raw, mtime=mtime) as packed:
        if mode == "wb":
            yield packed
            return
        with io.TextIOWrapper(packed, encoding=encoding) as text:
            yield text


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """``Path(path).write_text(text)``, all or nothing."""
    with atomic_open(path, "w", encoding=encoding) as handle:
        handle.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """``Path(path).write_bytes(data)``, all or nothing."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def save_tensors(tensors: dict, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """``safetensors.torch.save_file(tensors, path)``, all or nothing."""
    from safetensors.torch import save_file

    with atomic_path(path) as temporary:
        save_file(tensors, str(temporary), metadata=metadata)


def is_temporary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a temporary file of :func:`atomic_path` (left only by a process killed mid-write)."""
    return _TEMPORARY.fullmatch(Path(path).name) is not None
