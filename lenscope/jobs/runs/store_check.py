"""Check a store (database integrity, damaged or missing tensor files, orphans, leftovers, a full disk) and repair
it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.exc import DatabaseError

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.models.atomic_files import is_temporary
from lenscope.store.errors import store_error
from lenscope.store.schema import PredictorRecord, Result, Run
from lenscope.store.settings import get_settings
from lenscope.store.store import Store
from lenscope.store.tensors import SUFFIX, TEMP_SUFFIX

# Files younger than this are left alone: a running collection writes a run's file just before its row.
GRACE_S = 3600.0


@dataclass
class StoreCheck:
    """What :func:`check_store` found."""

    integrity: list[str] = field(default_factory=list)  # the database's own complaints
    damaged_files: dict[str, str] = field(default_factory=dict)  # run tensor file hash -> problem
    damaged_runs: list[int] = field(default_factory=list)  # runs marked damaged, or whose file is damaged
    damaged_caches: dict[str, str] = field(default_factory=dict)  # cached result file hash -> problem
    orphans: list[Path] = field(default_factory=list)  # tensor files nothing refers to
    temp_files: list[Path] = field(default_factory=list)  # left by a process killed mid-write (tensors, artifacts)
    missing_artifacts: list[str] = field(default_factory=list)  # predictors whose saved weights are gone
    read_only: str | None = None  # why the store was opened read-only (checked, not repairable), None if writable
    disk_full: str | None = None  # the disk holding the store is (nearly) full: where, and what to do

    @property
    def healthy(self) -> bool:
        return not (self.integrity or self.damaged_runs or self.damaged_caches or self.orphans
                    or self.temp_files or self.missing_artifacts or self.disk_full)

    @property
    def repairable(self) -> bool:
        """Whether ``doctor --fix`` has something to repair (files to delete, runs to mark and generate again)."""
        return bool(self.damaged_runs or self.damaged_caches or self.orphans or self.temp_files)

    def lines(self) -> list[str]:
        """One line per kind of problem found (or one saying the store is healthy)."""
        found = [f"disk: {self.disk_full}"] if self.disk_full else []
        found += [f"database: {problem}" for problem in self.integrity]
        if self.damaged_runs:
            ids = ", ".join(map(str, self.damaged_runs[:10])) + (" ..." if len(self.damaged_runs) > 10 else "")
            found.append(f"{len(self.damaged_runs)} run(s) with a missing or damaged tensor file: {ids}")
        if self.damaged_caches:
            found.append(f"{len(self.damaged_caches)} cached feature file(s) missing or damaged (recomputed "
                         "when next needed)")
        if self.orphans:
            found.append(f"{len(self.orphans)} orphan tensor file(s) that no run or result refers to")
        if self.temp_files:
            found.append(f"{len(self.temp_files)} temporary file(s) left by an interrupted write")
        found += [f"predictor {name}: its saved weights are missing (train it again)"
                  for name in self.missing_artifacts]
        found = found or ["the store is healthy"]
        if self.read_only:
            found.append(f"opened read-only ({self.read_only}): checked only; --fix needs write access")
        return found


def _integrity(store: Store) -> list[str]:
    """The database's own complaints (a failure to ask, e.g. a full disk, raises its one-line store error)."""
    try:
        with store.engine.connect() as conn:
            if store.engine.dialect.name == "sqlite":
                rows = [r[0] for r in conn.execute(text("PRAGMA integrity_check")).all()]
                return [] if rows == ["ok"] else rows
            conn.execute(text("SELECT 1"))
            return []
    except DatabaseError as exc:
        raise store_error(store.url, exc) from exc


def _cached_hashes(store: Store) -> set[str]:
    """Hashes of the tensor files that stored results (feature and embedding caches) refer to."""
    with store.session() as s:
        payloads = s.scalars(select(Result.payload)).all()
    return {p["hash"] for p in payloads if isinstance(p, dict) and isinstance(p.get("hash"), str)}


def check_store(store: Store, on_progress: Progress = no_progress, grace_s: float = GRACE_S) -> StoreCheck:
    """Verify the database and every tensor file against its hash; ``on_progress`` counts files checked."""
    check = StoreCheck(integrity=_integrity(store), read_only=store.read_only_reason, disk_full=store.disk_full())
    with store.session() as s:
        runs = s.execute(select(Run.id, Run.features_hash, Run.damaged)).all()
        artifacts = s.execute(select(PredictorRecord.name, PredictorRecord.artifact_path)).all()
    cached = _cached_hashes(store)
    by_hash: dict[str, list[int]] = {}  # files of runs not marked damaged yet (marked ones wait for regeneration)
    for run_id, digest, damaged in runs:
        if damaged:
            check.damaged_runs.append(run_id)
        else:
            by_hash.setdefault(digest, []).append(run_id)
    total = len(by_hash) + len(cached)
    for i, digest in enumerate([*by_hash, *cached], start=1):
        problem = store.tensors.problem(digest)
        if problem is not None and digest in by_hash:
            check.damaged_files[digest] = problem
            check.damaged_runs += [r for r in by_hash[digest] if r not in check.damaged_runs]
        elif problem is not None:
            check.damaged_caches[digest] = problem
        on_progress(i, total, "verifying tensor files")
    check.damaged_runs.sort()
    referenced = {digest for _, digest, _ in runs} | cached
    now = time.time()
    for path in store.tensors.files():
        if now - path.stat().st_mtime < grace_s:
            continue
        if path.suffix == TEMP_SUFFIX:
            check.temp_files.append(path)
        elif path.suffix == SUFFIX and path.stem not in referenced:
            check.orphans.append(path)
    check.temp_files += _leftovers(get_settings().artifact_dir, now - grace_s)
    check.missing_artifacts = [name for name, path in artifacts if path and not Path(path).exists()]
    return check


def _leftovers(folder: Path, before: float) -> list[Path]:
    """The temporary files of all-or-nothing writes (:func:`~lenscope.models.atomic_files.is_temporary`) under
    ``folder`` last changed before ``before``: left by a process killed mid-write."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob(".*") if is_temporary(p) and p.is_file() and p.stat().st_mtime < before)


def repair_store(store: Store, check: StoreCheck) -> list[str]:
    """Repair what ``check`` found that the store can repair by itself: damaged runs are marked for
    regeneration (their files deleted), damaged cache files deleted (recomputed when next needed), orphans and
    temporary files deleted. Returns what was done."""
    done = []
    marked = sum(store.mark_damaged(digest) for digest in check.damaged_files)
    if marked:
        done.append(f"marked {marked} run(s) for regeneration")
    for digest in check.damaged_caches:
        store.tensors.discard(digest)
    if check.damaged_caches:
        done.append(f"deleted {len(check.damaged_caches)} damaged cache file(s)")
    for path in [*check.orphans, *check.temp_files]:
        path.unlink(missing_ok=True)
    if check.orphans or check.temp_files:
        done.append(f"deleted {len(check.orphans)} orphan and {len(check.temp_files)} temporary file(s)")
    return done
