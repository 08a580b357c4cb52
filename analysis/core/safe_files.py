"""Reading a user's files within bounds: one regular file, at most so many bytes, lines, columns, rows, JSON levels
and integer digits, every refusal a one-line :class:`LimitError` naming the file and the limit.

Every reader of a file a user names or uploads goes through here before anything parses it:

- :func:`regular_file`: the path is a regular file (not a directory, device, named pipe or socket);
- :func:`read_bounded` (or :func:`bounded_lines`, line by line): reads at most ``max_bytes + 1`` bytes, never
  trusting ``st_size`` (0 for devices, pipes and ``/proc``), decompressing gzip within the same bound;
- :func:`check_lines`: no line longer than :data:`MAX_LINE_BYTES`;
- :func:`read_csv_bounded`: the header's column count (at most :data:`MAX_COLUMNS`, the message shows a few names,
  never all) and the line lengths before pandas parses, then at most ``max_rows`` rows;
- :func:`load_json`: nesting (:data:`MAX_JSON_DEPTH`, counted on the text before ``json.loads``) and integer
  digits (:data:`MAX_INT_DIGITS`).

Files read from disk without a stated limit get :func:`disk_limit`: a share of the memory this process may still
use (parsing a table takes up to about 25 times its bytes), and never less than the upload limit, 50 MB.
"""

from __future__ import annotations

import csv
import gzip as gzip_module
import io
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

try:
    import resource
except ImportError:  # not on Windows: no address-space limit to read
    resource = None

MAX_COLUMNS = 1_000  # columns of a CSV header
MAX_LINE_BYTES = 16 * 2**20  # one line of a CSV, JSON-lines or text file (a long prompt is well under 1 MB)
MAX_JSON_DEPTH = 32  # nested arrays / objects (the app's files use 3 levels at most)
MAX_INT_DIGITS = 100  # digits of one JSON integer (an int64 has 19; more than ~308 overflow a float)
MAX_CONFIG_BYTES = 2**20  # a settings file such as a cost model's JSON (a few hundred bytes in practice)
MEMORY_SHARE = 32  # a file read from disk may use 1/32 of the memory left: parsing takes up to ~25x its bytes
MIN_DISK_BYTES = 50 * 2**20  # ... but never less than the upload limit
UNKNOWN_MEMORY = 8 * 2**30  # assumed when the platform says nothing about memory
_CHUNK = 16 * 2**20
_PREVIEW_COLUMNS = 3  # column names shown in a too-many-columns message
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string literal, escapes included
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class LimitError(ValueError):
    """A file over one of the bounds of this module, or not a file at all; its message is one line naming the file
    and the limit."""


def label(path: str | Path | None, what: str = "file") -> str:
    """How messages name a file: ``trace file '/data/t.csv'``, or ``the trace file`` without a path or name."""
    return f"{what} {str(path)!r}" if path is not None else f"the {what}"


def _mb(n: float) -> str:
    """A size for messages: bytes, KB or MB."""
    if n < 10 * 2**10:
        return f"{n:,.0f} bytes"
    if n < 2**20:
        return f"{n / 2**10:,.0f} KB"
    return f"{n / 2**20:,.1f} MB" if n < 10 * 2**20 else f"{n / 2**20:,.0f} MB"


def _short(exc: BaseException, limit: int = 200) -> str:
    """An exception's message cut to one short line (pandas and json messages may quote a whole line)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[:limit] + "..."


# -- the file itself --------------------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def regular_file(path: str | Path, what: str = "file") -> Path:
    """``path`` when it is a regular file (symlinks followed); LimitError when it is missing, a directory, a device,
    a named pipe or a socket. ``what`` names the kind of file in messages (``prompts file``)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise LimitError(f"{label(path, what)} does not exist") from None
    except PermissionError:
        raise
    except OSError as exc:  # a symlink loop, a name too long
        raise LimitError(f"{label(path, what)} cannot be opened: {exc.strerror or _short(exc)}") from None
    if not stat.S_ISREG(mode):
        hint = "; save what it streams to a file first" if stat.S_ISFIFO(mode) else ""
        raise LimitError(f"{label(path, what)} is {_kind(mode)}, not a regular file{hint}")
    return path


# -- how much may be read ----------------------------------------------------------------------------------------


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None  # absent, or "max"


def _cgroup_available() -> int | None:
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 2**60:  # v1 writes ~2**63 for "no limit"
            return max(cap - used, 0)
    return None


def _address_space_available() -> int | None:
    """What RLIMIT_AS (``ulimit -v``) leaves of this process's address space."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(soft - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return soft


def memory_available() -> int | None:
    """Bytes this process may still allocate: the least of the system's available memory, its cgroup's headroom and
    its address-space limit (those the platform tells); None when it tells none."""
    known = [m for m in (_meminfo_available(), _cgroup_available(), _address_space_available()) if m is not None]
    return min(known) if known else None


def disk_limit() -> tuple[int, str]:
    """The byte bound of a file read from disk without a stated limit, and why (for messages): 1/32
    (:data:`MEMORY_SHARE`) of :func:`memory_available`, since parsing a table takes up to about 25 times its bytes,
    and at least :data:`MIN_DISK_BYTES` (the upload limit)."""
    available = memory_available()
    share = (UNKNOWN_MEMORY if available is None else available) // MEMORY_SHARE
    if share <= MIN_DISK_BYTES:
        return MIN_DISK_BYTES, ""
    return share, (f" (1/{MEMORY_SHARE} of the {_mb(available or UNKNOWN_MEMORY)} of memory available, as parsing "
                   "takes up to ~25x a file's size)")


# -- reading ----------------------------------------------------------------------------------------------------


def _too_large(name: str, max_bytes: int, why: str, size: int | None = None, gzip: bool = False) -> LimitError:
    what = f"is {_mb(size)}" if size is not None else f"holds more than {_mb(max_bytes)}"
    return LimitError(f"{name} {what}{' uncompressed' if gzip else ''}; the limit is {_mb(max_bytes)}{why}")


def read_bounded(path: str | Path, max_bytes: int, name: str | None = None, gzip: bool = False,
                 why: str = "") -> bytes:
    """The bytes of ``path`` (decompressed when ``gzip``), reading at most ``max_bytes + 1`` of them: LimitError
    above ``max_bytes``. Works for devices and pipes (their ``st_size`` of 0 is never trusted; call
    :func:`regular_file` first to refuse them). ``name`` names the file in messages (default: its path); ``why``
    follows the limit in them."""
    name = name or label(path)
    try:
        with open(path, "rb") as raw:
            info = os.fstat(raw.fileno())  # the file opened, not whatever the path names by now
            size = info.st_size if stat.S_ISREG(info.st_mode) else 0
            if not gzip and size > max_bytes:
                raise _too_large(name, max_bytes, why, size)  # refused before reading a byte
            fh = gzip_module.GzipFile(fileobj=raw) if gzip else raw
            # A regular file's size is read in one go (one buffer, no copy); beyond it, chunks until the limit.
            first = fh.read(min(size, max_bytes) + 1) if size and not gzip else b""
            parts, total = [first], len(first)
            while total <= max_bytes:
                chunk = fh.read(min(_CHUNK, max_bytes + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
    except IsADirectoryError:
        raise LimitError(f"{name} is a directory, not a regular file") from None
    except (gzip_module.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(f"{name} is not a readable gzip file: {_short(exc)}") from None
    if total > max_bytes:
        raise _too_large(name, max_bytes, why, gzip=gzip)
    return b"".join(parts)


def bounded_lines(path: str | Path, max_bytes: int, name: str | None = None, gzip: bool = False, why: str = "",
                  max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(1-based number, bytes) of each line of ``path`` (decompressed when ``gzip``), read lazily: at most
    ``max_bytes`` in all and ``max_line`` a line (LimitError beyond either). Decompression errors propagate as gzip
    raises them (``gzip.BadGzipFile``, ``EOFError``, ``zlib.error``), for the caller to say what file it expected."""
    name = name or label(path)
    total = 0
    try:
        with open(path, "rb") as raw:
            fh = gzip_module.GzipFile(fileobj=raw) if gzip else raw
            number = 0
            while line := fh.readline(max_line + 1):
                number += 1
                total += len(line)
                if total > max_bytes:
                    raise _too_large(name, max_bytes, why, gzip=gzip)
                if len(line.rstrip(b"\r\n")) > max_line:
                    raise LimitError(f"{name} line {number:,} is longer than {_mb(max_line)}; the limit is "
                                     f"{_mb(max_line)} a line")
                yield number, line
    except IsADirectoryError:
        raise LimitError(f"{name} is a directory, not a regular file") from None


def check_lines(data: bytes, name: str, max_line: int = MAX_LINE_BYTES) -> None:
    """LimitError naming the first line of ``data`` longer than ``max_line`` bytes (read in chunks: no copy of
    ``data``, memory a fraction of it)."""
    if len(data) <= max_line:
        return
    view = np.frombuffer(data, np.uint8)
    start, lines = 0, 0  # where the current line starts, lines ended before it
    for lo in range(0, len(view), _CHUNK):
        ends = np.flatnonzero(view[lo:lo + _CHUNK] == 10) + lo
        if len(ends):
            lengths = np.diff(ends, prepend=start - 1) - 1
            longer = np.flatnonzero(lengths > max_line)
            if len(longer):
                _long_line(name, lines + int(longer[0]) + 1, max_line)
            start, lines = int(ends[-1]) + 1, lines + len(ends)
        if lo + _CHUNK - start > max_line and lo + _CHUNK < len(view):
            _long_line(name, lines + 1, max_line)  # no line end yet, and already too long
    if len(view) - start > max_line:
        _long_line(name, lines + 1, max_line)


def _long_line(name: str, number: int, max_line: int) -> None:
    raise LimitError(f"{name} line {number:,} is longer than {_mb(max_line)}; the limit is {_mb(max_line)} a line")


# -- CSV --------------------------------------------------------------------------------------------------------


def _header_fields(line: bytes) -> list[str]:
    text = line.decode("utf-8", errors="replace").removeprefix("\ufeff")
    try:
        return next(csv.reader([text]), [])
    except csv.Error:  # a field over csv's own size limit: count separators
        return text.split(",")


def column_list(columns, shown: int = 10, width: int = 40, quote: bool = True) -> str:
    """Column names for a message: ``['a', 'b']``, or the first ``shown`` (each cut to ``width`` characters) and how
    many there are: ``['a', 'b', ... (400,000 columns)]``; without ``quote``: ``a, b, ... (400,000 columns)``."""
    names = [str(c) for c in columns]
    cut = [n if len(n) <= width else n[:width] + "..." for n in names[:shown]]
    more = f", ... ({len(names):,} columns)" if len(names) > shown else ""
    return "[" + ", ".join(map(repr, cut)) + more + "]" if quote else ", ".join(cut) + more


def check_csv_header(data: bytes, name: str, max_columns: int = MAX_COLUMNS) -> None:
    """LimitError when the first line of ``data`` has more than ``max_columns`` columns; the message shows the first
    few names only."""
    end = data.find(b"\n")
    first = data if end < 0 else data[:end]
    if first.count(b",") < max_columns:
        return  # fewer separators than the limit: fewer columns too
    fields = _header_fields(first)
    if len(fields) <= max_columns:
        return
    raise LimitError(f"{name} has {len(fields):,} columns {column_list(fields, _PREVIEW_COLUMNS)}; the limit is "
                     f"{max_columns:,}")


def read_csv_bounded(data: bytes, name: str, max_rows: int | None = None, max_columns: int = MAX_COLUMNS,
                     max_line: int = MAX_LINE_BYTES, **read_csv: Any) -> pd.DataFrame:
    """``pd.read_csv`` of ``data`` after checking its line lengths and its header's column count, reading at most
    ``max_rows`` rows (LimitError beyond; None: all); pandas' parse errors become one-line ValueErrors naming the
    file. ``read_csv`` holds pandas options."""
    check_lines(data, name, max_line)
    check_csv_header(data, name, max_columns)
    try:
        frame = pd.read_csv(io.BytesIO(data), nrows=None if max_rows is None else max_rows + 1, **read_csv)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name} is not a readable CSV file: {_short(exc)}") from None
    except MemoryError:
        raise LimitError(f"{name} ({_mb(len(data))}) needs more memory than this process has left") from None
    if max_rows is not None and len(frame) > max_rows:
        raise LimitError(f"{name} has more than {max_rows:,} rows; the limit is {max_rows:,}: cut it (e.g. head -n)")
    return frame


# -- JSON -------------------------------------------------------------------------------------------------------


def json_depth(text: str | bytes) -> int:
    """How deeply the arrays and objects of JSON ``text`` nest (brackets inside strings left out), counted without
    parsing it. Only text with many brackets is scanned: the depth is at most their count."""
    data = text.encode("utf-8", errors="surrogatepass") if isinstance(text, str) else text
    opening = data.count(b"[") + data.count(b"{")
    if opening <= 1:
        return opening
    brackets = np.frombuffer(_STRING.sub(b"", data).translate(None, _NOT_BRACKETS), np.uint8)
    if not len(brackets):
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1).astype(np.int32)
    return max(int(np.cumsum(steps).max()), 0)


def _digits_checker(name: str, max_digits: int):
    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > max_digits:
            raise LimitError(f"{name} holds an integer of {len(digits.lstrip('-')):,} digits; the limit is "
                             f"{max_digits:,}")
        return int(digits)

    return parse_int


_LONG_DIGITS = {str: "[0-9]{%d,}", bytes: b"[0-9]{%d,}"}


def load_json(text: str | bytes, name: str, max_depth: int = MAX_JSON_DEPTH,
              max_int_digits: int = MAX_INT_DIGITS) -> Any:
    """``json.loads(text)``, refusing (LimitError naming ``name``) arrays and objects nested deeper than
    ``max_depth``, counted before parsing, and integers of more than ``max_int_digits`` digits. Malformed JSON
    raises ``json.JSONDecodeError`` (a ValueError) as ``json.loads`` does; bytes that are not UTF-8 a
    UnicodeDecodeError (a ValueError too)."""
    brackets = ("[", "{") if isinstance(text, str) else (b"[", b"{")
    if len(text) > max_depth and text.count(brackets[0]) + text.count(brackets[1]) > max_depth:
        depth = json_depth(text)  # only text with more brackets than the limit can nest deeper
        if depth > max_depth:
            raise LimitError(f"{name} nests JSON {depth:,} levels deep; the limit is {max_depth:,}")
    long_digits = _LONG_DIGITS[bytes if isinstance(text, (bytes, bytearray)) else str] % (max_int_digits + 1)
    if len(text) <= max_int_digits or re.search(long_digits, text) is None:
        return json.loads(text)  # no run of digits that long anywhere: no need to check each integer
    return json.loads(text, parse_int=_digits_checker(name, max_int_digits))


# -- whole files ------------------------------------------------------------------------------------------------


def load_json_file(path: str | Path, max_bytes: int, what: str = "JSON file") -> Any:
    """The JSON value of regular file ``path`` of at most ``max_bytes`` bytes, within :func:`load_json`'s bounds;
    malformed JSON is a one-line ValueError naming the file (``what`` says what kind: ``cost JSON``)."""
    name = label(path, what)
    data = read_bounded(regular_file(path, what), max_bytes, name)
    try:
        return load_json(data, name)
    except LimitError:
        raise
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # not UTF-8, or Python's own limit on integer digits
        raise ValueError(f"{name} is not valid JSON: {_short(exc)}") from None


def read_csv_file(path: str | Path, what: str = "CSV file", max_bytes: int | None = None,
                  max_rows: int | None = None, **read_csv: Any) -> pd.DataFrame:
    """:func:`read_csv_bounded` of regular file ``path``, read within ``max_bytes`` (None: :func:`disk_limit`)."""
    name, why = label(path, what), ""
    if max_bytes is None:
        max_bytes, why = disk_limit()
    data = read_bounded(regular_file(path, what), max_bytes, name, why=why)
    return read_csv_bounded(data, name, max_rows, **read_csv)
