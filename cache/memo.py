"""One memo for stored results: a computation's payload kept in the store's ``results`` table under a key made from
its kind and a canonical JSON of its config (plus a version, so that changing what a computation means leaves its old
results behind), computed once even when several sessions or processes ask for it at the same moment.

:func:`memo` returns the stored value, or takes the key's lock, looks again, computes, stores and returns;
:func:`stored` only looks (pages that show what exists); :func:`memo_many` serves a batch of configs, computing the
missing ones together. A :class:`Codec` turns values into payloads and back (:data:`JSON`, or :data:`TENSORS`: a dict
of tensors kept in the tensor store under its hash, recomputed when that file is missing or damaged).

The lock: a per-key lock of this process (browser sessions are threads of one process), and across processes a
``flock`` on ``locks/<key>.lock`` beside a SQLite file, or a PostgreSQL advisory lock on its own connection. A store
opened read-only computes and keeps nothing (reading works as it is); other databases lock within the process only
(two processes may then compute one key twice; the key's unique row still ends up once).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from sqlalchemy import select, text

from lenscope.store.schema import Result
from lenscope.store.settings import sqlite_file
from lenscope.store.tensors import DamagedTensorError

try:
    import fcntl
except ImportError:  # Windows: the per-process lock only
    fcntl = None

V = TypeVar("V")
VERSION_KEY = "memo_version"  # a versioned config stores its version under this key (unversioned: key unchanged)
LOCK_FOLDER = "locks"
_LOOKUP_CHUNK = 500


class Store(Protocol):
    """What the memo uses of :class:`lenscope.store.store.Store` (which imports this module)."""

    url: str
    engine: Any
    tensors: Any

    @property
    def read_only(self) -> bool: ...

    def session(self) -> Any: ...

    def put_result(self, kind: str, name: str, config: dict, payload: dict) -> int: ...


class StaleResult(LookupError):
    """A stored payload that can no longer give its value (e.g. its tensor file is missing or damaged): the memo
    computes it again and replaces it."""


@dataclass(frozen=True)
class Codec:
    """How a value is kept: ``encode(store, value)`` -> the JSON payload stored (may write elsewhere, e.g. tensors),
    ``decode(store, payload)`` -> the value, raising :class:`StaleResult` when the payload no longer gives it."""

    encode: Callable[[Store, Any], dict]
    decode: Callable[[Store, dict], Any]


def _tensors_in(store: Store, payload: dict) -> dict:
    try:
        return store.tensors.get(payload["hash"])
    except DamagedTensorError as exc:
        raise StaleResult(str(exc)) from exc


JSON = Codec(lambda _store, value: value, lambda _store, payload: payload)
TENSORS = Codec(lambda store, tensors: {"hash": store.tensors.put(tensors)[0]}, _tensors_in)


class Memoised(NamedTuple, Generic[V]):
    """A memo's value and whether it came from the store (False: computed by this call)."""

    value: V
    cached: bool


def versioned(config: dict, version: int | str | None = None) -> dict:
    """The config a result is stored under: ``config`` itself when unversioned (the key every result stored before
    versions had), else ``config`` with ``memo_version``."""
    if version is None:
        return config
    if VERSION_KEY in config:
        raise ValueError(f"a memo config may not hold {VERSION_KEY!r}: pass version= instead")
    return {**config, VERSION_KEY: version}


def memo_key(kind: str, config: dict, version: int | str | None = None) -> str:
    """The result key of ``kind`` + ``config`` (+ ``version``): SHA-256 of their canonical JSON (sorted keys), the
    key :meth:`lenscope.store.store.Store.put_result` stores under (``json_key(kind, config)``)."""
    canonical = json.dumps([kind, versioned(config, version)], sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# locks ---------------------------------------------------------------------------------------------------------
_registry_lock = threading.Lock()
_key_locks: dict[tuple[str, str], list] = {}  # (store url, key) -> [lock, holders and waiters]


@contextmanager
def _thread_lock(url: str, key: str) -> Iterator[None]:
    """This process's lock of ``key`` (dropped from the registry when nobody holds or awaits it)."""
    with _registry_lock:
        entry = _key_locks.setdefault((url, key), [threading.Lock(), 0])
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _registry_lock:
            entry[1] -= 1
            if entry[1] == 0:
                del _key_locks[url, key]


def lock_folder(store: Store) -> Path | None:
    """Where the lock files of a SQLite file store go (``locks/`` beside the file); None for other databases, an
    in-memory one, or a store opened read-only."""
    path = sqlite_file(store.url)
    if fcntl is None or store.read_only or path is None:
        return None
    return path.parent / LOCK_FOLDER


@contextmanager
def _file_lock(folder: Path, key: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder/<key>.lock``, removed by its holder on release (a waiter that then
    finds its file unlinked opens the new one), so the folder only holds the locks in use."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # the holder before us removed this file: lock the current one
    try:
        yield
    finally:
        with suppress(OSError):
            path.unlink()
        os.close(fd)  # releases the flock


def _advisory_id(key: str) -> int:
    """A signed 64-bit PostgreSQL advisory lock id from a hex key."""
    return int.from_bytes(bytes.fromhex(key[:16]), "big", signed=True)


@contextmanager
def _postgres_lock(store: Store, key: str) -> Iterator[None]:
    """A session-level advisory lock held on its own (autocommit) connection: no transaction stays open meanwhile,
    and the server releases it if this process dies."""
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _advisory_id(key)})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _advisory_id(key)})


@contextmanager
def key_lock(store: Store, key: str) -> Iterator[None]:
    """Hold the lock of result ``key`` of ``store``: within this process, and across processes on a SQLite file
    (a lock file) or PostgreSQL (an advisory lock). Not re-entrant: a computation must not memoise its own key."""
    with _thread_lock(store.url, key):
        folder = lock_folder(store)
        if folder is not None:
            with _file_lock(folder, key):
                yield
        elif not store.read_only and store.engine is not None and store.engine.dialect.name == "postgresql":
            with _postgres_lock(store, key):
                yield
        else:
            yield


# lookups -------------------------------------------------------------------------------------------------------
_MISSING = object()


def _payloads(store: Store, keys: Sequence[str]) -> dict[str, dict]:
    """Stored payloads by key (keys with none are absent), a few queries for any number of keys."""
    found: dict[str, dict] = {}
    distinct = list(dict.fromkeys(keys))
    with store.session() as s:
        for start in range(0, len(distinct), _LOOKUP_CHUNK):
            chunk = distinct[start:start + _LOOKUP_CHUNK]
            rows = s.execute(select(Result.key, Result.payload).where(Result.key.in_(chunk))).all()
            found.update((key, payload) for key, payload in rows)
    return found


def _decoded(store: Store, payload: Any, codec: Codec) -> Any:
    if payload is None or payload is _MISSING:
        return _MISSING
    try:
        return codec.decode(store, payload)
    except StaleResult:
        return _MISSING


def _lookup(store: Store, key: str, codec: Codec) -> Any:
    return _decoded(store, _payloads(store, [key]).get(key, _MISSING), codec)


def stored(store: Store, kind: str, config: dict, *, version: int | str | None = None,
           codec: Codec = JSON) -> Any | None:
    """The value stored for ``kind`` + ``config`` (+ ``version``), or None (nothing is computed or locked)."""
    value = _lookup(store, memo_key(kind, config, version), codec)
    return None if value is _MISSING else value


def memo_entry(store: Store, kind: str, config: dict, compute: Callable[[], V], *, name: str,
               version: int | str | None = None, refresh: bool = False, codec: Codec = JSON) -> Memoised[V]:
    """The value of ``kind`` + ``config`` (+ ``version``) and whether it was stored: read from the store, else
    computed once under the key's lock (a caller that waited finds the first caller's result), stored as ``name``
    and returned. ``refresh`` computes and replaces it whatever is stored. A read-only store computes and keeps
    nothing."""
    config = versioned(config, version)
    key = memo_key(kind, config)
    if not refresh:
        value = _lookup(store, key, codec)
        if value is not _MISSING:
            return Memoised(value, True)
    if store.read_only:
        return Memoised(compute(), False)
    with key_lock(store, key):
        if not refresh:
            value = _lookup(store, key, codec)  # another session or process computed it while we waited
            if value is not _MISSING:
                return Memoised(value, True)
        value = compute()
        store.put_result(kind, name, config, codec.encode(store, value))
        return Memoised(value, False)


def memo(store: Store, kind: str, config: dict, compute: Callable[[], V], *, name: str,
         version: int | str | None = None, refresh: bool = False, codec: Codec = JSON) -> V:
    """:func:`memo_entry`'s value."""
    return memo_entry(store, kind, config, compute, name=name, version=version, refresh=refresh, codec=codec).value


def memo_many(store: Store, kind: str, configs: Sequence[dict], compute: Callable[[list[int]], Sequence[V]], *,
              names: Sequence[str] | Callable[[int], str], version: int | str | None = None, codec: Codec = JSON,
              batch_size: int | None = None,
              on_batch: Callable[[int, int], None] | None = None) -> list[Memoised[V]]:
    """One value per config (in order, with whether it was stored), the stored ones read in a few queries and the
    missing ones computed together: ``compute(positions)`` gets the positions in ``configs`` of up to
    ``batch_size`` missing distinct configs (all of them when None) and returns their values, which are stored
    (named ``names[i]`` or ``names(i)``) before the next batch. A batch is not locked: two callers missing the same
    configs at once may both compute them (their keys still end up stored once). ``on_batch(done, missing)`` follows
    each stored batch. A read-only store keeps nothing."""
    full = [versioned(c, version) for c in configs]
    keys = [memo_key(kind, c) for c in full]
    payloads = _payloads(store, keys)
    out: list[Memoised | None] = [None] * len(configs)
    todo: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        value = _decoded(store, payloads.get(key, _MISSING), codec)
        if value is _MISSING:
            todo.setdefault(key, []).append(i)
        else:
            out[i] = Memoised(value, True)
    firsts = [positions[0] for positions in todo.values()]
    step = batch_size or max(len(firsts), 1)
    for start in range(0, len(firsts), step):
        batch = firsts[start:start + step]
        values = list(compute(batch))
        if len(values) != len(batch):
            raise ValueError(f"the {kind} computation returned {len(values)} values for {len(batch)} configs")
        for i, value in zip(batch, values):
            if not store.read_only:
                label = names(i) if callable(names) else names[i]
                store.put_result(kind, label, full[i], codec.encode(store, value))
            for j in todo[keys[i]]:
                out[j] = Memoised(value, False)
        if on_batch is not None:
            on_batch(start + len(batch), len(firsts))
    return out  # type: ignore[return-value]

