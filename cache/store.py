"""High-level access to the lenscope store: runs keyed by content, features, predictions, traces."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import torch
from sqlalchemy import create_engine, delete, event, func, select
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

import lenscope.store.memo as _memo
from lenscope.store.errors import (
    DamagedRunError,
    DatasetModelError,
    StoreReadOnlyError,
    StoreUnavailableError,
    disk_full_message,
    low_space,
    not_writable,
    store_error,
    store_location,
)
from lenscope.store.migrations import migrate
from lenscope.store.names import dataset_name
from lenscope.store.records import GenerationShape, ModelShape, RunFeatures
from lenscope.store.schema import (
    Dataset,
    DatasetRun,
    ModelRecord,
    Prediction,
    PredictorRecord,
    Prompt,
    Result,
    Run,
    Trace,
    TraceRequest,
)
from lenscope.store.settings import get_settings, sqlite_file
from lenscope.store.tensors import DamagedTensorError, TensorStore, hidden_key_filter, pack_hidden, unpack_hidden


def text_hash(text: str) -> str:
    """SHA-256 hex digest of a string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_key(*parts: object) -> str:
    """Content key of JSON-serialisable parts (sorted keys, so dict order does not matter)."""
    return text_hash(json.dumps(parts, sort_keys=True, default=str))


@dataclass
class StoredRun:
    """A run read back from the store, with its features."""

    id: int
    prompt_id: int
    prompt: str
    response: str
    prompt_len: int
    output_length: int
    finished: bool
    settings: dict
    features: RunFeatures
    content_start: int = 0
    # Every answer id when the features stop before the answer does (:attr:`features_cut`), else None.
    kept_output_ids: torch.Tensor | None = None

    @property
    def layers(self) -> list[int]:
        return sorted(self.features.hidden)

    @property
    def features_cut(self) -> bool:
        """Whether the features stop before the answer does: a censored run imported with the features of its
        first answer steps only (what the study reads of it), see :meth:`Store.save_runs`."""
        return _stops_early(self)

    @property
    def output_ids(self) -> list[int]:
        """The answer's token ids, all of them also when the features stop early."""
        if self.kept_output_ids is not None:
            return self.kept_output_ids.tolist()
        return self.features.input_ids[self.prompt_len:].tolist()


@dataclass
class NewRun:
    """A generation to store, with the prompt it answers and where the prompt came from."""

    prompt: str
    generation: GenerationShape
    source: str = "user"
    source_ref: str = ""


@dataclass(frozen=True)
class DamagedRun:
    """A run marked damaged: what generating it again needs."""

    run_id: int
    settings: dict
    layers: list[int]
    prompt: str
    source: str
    source_ref: str
    model_key: str
    model_spec: str
    dtype: str


def _stops_early(generation: GenerationShape | StoredRun) -> bool:
    """Whether a generation's (or a stored run's) features stop before its answer does."""
    return len(generation.features) < generation.prompt_len + generation.output_length


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    """Per-connection settings; none writes to the file (WAL mode, which does, is set by :func:`migrate` once the
    database is known to be a lenscope store)."""
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(os.environ.get('LENSCOPE_DB_BUSY_TIMEOUT_MS', '30000'))}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_read_only_pragmas(dbapi_conn, record) -> None:
    _sqlite_pragmas(dbapi_conn, record)
    dbapi_conn.execute("PRAGMA query_only=ON")


def _plain_sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL without options (not a ``file:`` URI, not in memory), else None."""
    path = sqlite_file(url)
    return path if path is not None and not make_url(url).query else None


def _read_only_url(path: Path) -> URL:
    """A URL opening the SQLite file ``path`` read-only. In a folder this process cannot write, SQLite cannot
    create the WAL index it needs to read a WAL database, so the file is opened ``immutable`` (nothing can be
    writing it from there) unless a ``-wal`` file beside it says a writer has or had it open (its pages may be
    part of the data)."""
    query = {"mode": "ro", "uri": "true"}
    if not os.access(path.parent, os.W_OK) and not path.with_name(path.name + "-wal").exists():
        query["immutable"] = "1"
    return URL.create("sqlite", database=f"file:{quote(str(path.resolve()))}", query=query)


def _read_only_reason(url: str) -> str | None:
    """Why the store at ``url`` is to be opened read-only (None: it is writable, or not a SQLite file)."""
    path = _plain_sqlite_path(url)
    if path is not None:
        return not_writable(path) if path.exists() else None
    if url.startswith("sqlite:"):
        try:
            query = make_url(url).query
        except ArgumentError:  # a malformed URL fails with its own message when the engine is made
            return None
        if query.get("mode") == "ro" or query.get("immutable") == "1":
            return "its URL opens it read-only"
    return None


def _model_labels(first: tuple, second: tuple) -> tuple[str, str]:
    """How to tell two models apart in a message, from (key, source spec, info) of each: the spec, with the dtype
    when both have one spec, and the key when that is the same too."""
    labels = [first[1], second[1]]
    if labels[0] == labels[1]:
        labels = [f"{spec} ({(info or {}).get('dtype', 'float32')})" for _, spec, info in (first, second)]
    if labels[0] == labels[1]:
        labels = [f"{label}, model key {key[:12]}" for label, (key, _, _) in zip(labels, (first, second))]
    return labels[0], labels[1]


class Store:
    """The lenscope store: one SQLAlchemy database plus a content-addressed tensor directory."""

    def __init__(self, url: str | None = None, tensor_dir: Path | None = None) -> None:
        """Open the store at ``url`` (default: the settings'), creating it in an empty database. A database of
        another application is refused (:class:`lenscope.store.errors.NotAStoreError`) with nothing written to it; a
        SQLite file this process cannot write opens read-only (:attr:`read_only_reason`): reading works, a write
        raises :class:`lenscope.store.errors.StoreReadOnlyError`."""
        settings = get_settings()
        self.url = url or settings.db_url
        self.read_only_reason = _read_only_reason(self.url)
        path = _plain_sqlite_path(self.url)
        database = sqlite_file(self.url)
        if database is not None and self.read_only_reason is None:
            folder = database.parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(f"cannot create the data directory {folder} ({exc.strerror}); point "
                                            "LENSCOPE_DATA_DIR at a writable directory") from exc
        engine_url = _read_only_url(path) if self.read_only_reason and path is not None else self.url
        self.engine: Engine | None = None
        try:
            self.engine = create_engine(engine_url)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect",
                             _sqlite_read_only_pragmas if self.read_only_reason else _sqlite_pragmas)
            self.migrations = migrate(self.engine, store_location(self.url), read_only=self.read_only)
        except (SQLAlchemyError, ImportError) as exc:  # ImportError: the URL's database driver is missing
            self._dispose()
            raise store_error(self.url, exc) from exc
        except BaseException:  # not a store, a newer schema, read-only and older: the file is let go at once
            self._dispose()
            raise
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.tensors = TensorStore(tensor_dir or settings.tensor_dir)

    def _dispose(self) -> None:
        if self.engine is not None:
            self.engine.dispose()

    @property
    def read_only(self) -> bool:
        """Whether the store was opened read-only (see :attr:`read_only_reason`)."""
        return self.read_only_reason is not None

    def require_writable(self, what: str) -> None:
        """Raise :class:`lenscope.store.errors.StoreReadOnlyError` (one line naming the store) before ``what`` writes to
        a store opened read-only."""
        if self.read_only_reason is not None:
            raise self._read_only_error(what)

    def disk_full(self) -> str | None:
        """The message when the disk holding the database file or the tensor files is (nearly) full, else None."""
        database = sqlite_file(self.url)
        for folder in ([database.parent] if database is not None else []) + [self.tensors.root]:
            why = low_space(folder)
            if why is not None:
                return disk_full_message(folder, why)
        return None

    def _read_only_error(self, what: str) -> StoreReadOnlyError:
        return StoreReadOnlyError(
            f"the store {store_location(self.url)} is read-only ({self.read_only_reason}): {what} writes to it; "
            "make it writable or point LENSCOPE_DATA_DIR at a writable folder (reading commands work as it is)")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error.

        A database that stays locked, is unreachable or read-only raises a :class:`lenscope.store.errors.StoreError`
        with a message for the user; constraint violations (:class:`IntegrityError`) pass through.
        """
        try:
            with self._sessions() as s, s.begin():
                yield s
        except IntegrityError:
            raise
        except DatabaseError as exc:
            if self.read_only and "readonly" in str(exc).lower().replace("read-only", "readonly"):
                raise self._read_only_error("this command") from exc
            raise store_error(self.url, exc) from exc

    # models and prompts -------------------------------------------------------------------
    def _get_or_create(self, table, where, make) -> int:
        """Id of the row of ``table`` matching ``where``, inserting ``make()`` if there is none.

        Two clients racing to insert the same row both end up with the one that won.
        """
        def write() -> int:
            with self.session() as s:
                row_id = s.scalar(select(table.id).where(where))
                if row_id is None:
                    row = make()
                    s.add(row)
                    s.flush()
                    row_id = row.id
                return row_id

        return self._retry_on_conflict(write, f"a {table.__tablename__} row")

    @staticmethod
    def _retry_on_conflict(write: Callable[[], int], what: str) -> int:
        """``write()``, once more if another client inserted the same unique key meanwhile (the retry finds
        its row)."""
        for _ in range(2):
            try:
                return write()
            except IntegrityError:
                continue
        raise RuntimeError(f"could not store {what}")

    def ensure_model(self, target: ModelShape) -> int:
        """Id of the model row for ``target`` (created on first use)."""
        return self._get_or_create(
            ModelRecord, ModelRecord.key == target.key,
            lambda: ModelRecord(key=target.key, source=target.source.spec, num_layers=target.num_layers,
                                hidden_size=target.hidden_size,
                                info={"gguf_file": target.source.gguf_file, "dtype": target.dtype}))

    def model_source(self, model_id: int) -> str:
        """The spec a stored model was loaded from (e.g. ``embedded:smollm2-135m-instruct``)."""
        with self.session() as s:
            source = s.scalar(select(ModelRecord.source).where(ModelRecord.id == model_id))
        if source is None:
            raise KeyError(f"no model {model_id} in the store")
        return source

    def ensure_prompt(self, text: str, source: str = "user", source_ref: str = "") -> int:
        """Id of the prompt row for ``text`` (created on first use)."""
        digest = text_hash(text)
        return self._get_or_create(
            Prompt, Prompt.content_hash == digest,
            lambda: Prompt(content_hash=digest, text=text, source=source, source_ref=source_ref))

    # runs ------------------------------------------------------------------------------------
    @staticmethod
    def run_key(model_key: str, prompt: str, settings: dict, layers: Sequence[int]) -> str:
        """Key of a generation: model, prompt text, sampling settings and recorded layers."""
        return json_key(model_key, text_hash(prompt), settings, sorted(layers))

    def find_run(self, key: str, whole: bool = False) -> int | None:
        """Id of the run stored under ``key``, if any (see :meth:`find_runs`)."""
        return self.find_runs([key], whole).get(key)

    def find_runs(self, keys: Sequence[str], whole: bool = False) -> dict[str, int]:
        """Ids of the runs stored under any of ``keys`` (missing keys are absent).
        Damaged runs (see :meth:`mark_damaged`) are not found, so the caller generates them again; with ``whole``,
        neither are runs whose features stop before their answer does (:attr:`StoredRun.features_cut`), for a
        caller that reads every position: storing the request's features again completes them in place."""
        found: dict[str, int] = {}
        with self.session() as s:
            for start in range(0, len(keys), 500):
                query = select(Run.key, Run.id).where(Run.key.in_(keys[start:start + 500]), Run.damaged.is_not(True))
                if whole:
                    query = query.where(Run.feature_positions.is_(None))
                found.update(s.execute(query).all())
        return found

    def feature_positions(self, run_id: int) -> int | None:
        """How many positions of run ``run_id`` have features when they stop before its answer does, else None
        (every position has them)."""
        with self.session() as s:
            return s.scalar(select(Run.feature_positions).where(Run.id == run_id))

    def save_run(self, target: ModelShape, prompt: str, generation: GenerationShape,
                 source: str = "user", source_ref: str = "") -> int:
        """Store one generation; returns its run id (see :meth:`save_runs`)."""
        return self.save_runs(target, [NewRun(prompt, generation, source, source_ref)])[0]

    def save_runs(self, target: ModelShape, runs: Sequence[NewRun]) -> list[int]:
        """Store generations in one transaction (metadata row + one tensor file per run); returns their run
        ids in order. A run already stored under the same key keeps its id, also when another client
        stores it at the same moment; a damaged one, or one whose features stop earlier than the new one's, is
        rewritten in place with the new generation.

        A generation's features may stop before its answer does (an import keeping a censored answer's features to
        its first steps): the run's ``feature_positions`` says where, and its tensor file keeps every answer id."""
        self.require_writable("storing runs")
        model_id = self.ensure_model(target)
        rows = []
        for new in runs:
            gen, feats = new.generation, new.generation.features
            key = self.run_key(target.key, new.prompt, gen.settings, sorted(feats.hidden))
            digest, path = self.tensors.put({
                "input_ids": feats.input_ids, "entropy": feats.entropy.float(),
                "topk_ids": feats.topk_ids, "topk_probs": feats.topk_probs.float(), **pack_hidden(feats.hidden),
                **({"output_ids": torch.tensor(gen.output_ids, dtype=torch.long)} if _stops_early(gen) else {}),
            })
            rows.append((key, self.ensure_prompt(new.prompt, new.source, new.source_ref), new, digest, path))
        try:
            return self._insert_runs(model_id, rows)
        except IntegrityError:  # another client stored one of them meanwhile: the retry finds its id
            return self._insert_runs(model_id, rows)

    def _insert_runs(self, model_id: int, rows: list) -> list[int]:
        with self.session() as s:
            known = {run.key: run for run in s.scalars(select(Run).where(Run.key.in_([r[0] for r in rows])))}
            ids = []
            for key, prompt_id, new, digest, path in rows:
                run = known.get(key)
                positions = len(new.generation.features)
                if run is None or run.damaged or (run.feature_positions or positions) < positions:
                    gen = new.generation
                    fields = dict(key=key, model_id=model_id, prompt_id=prompt_id, settings=gen.settings,
                                  response=gen.text, prompt_tokens=gen.prompt_len, output_tokens=gen.output_length,
                                  finished=gen.finished, layers=sorted(gen.features.hidden), features_hash=digest,
                                  features_path=str(path), duration_s=gen.duration_s, damaged=False,
                                  tokens=[t[:256] for t in gen.features.tokens], content_start=gen.content_start,
                                  feature_positions=positions if _stops_early(gen) else None)
                    if run is None:
                        run = known[key] = Run(**fields)
                        s.add(run)
                    else:
                        for name, value in fields.items():
                            setattr(run, name, value)
                    s.flush()
                ids.append(run.id)
            return ids

    def load_run(self, run_id: int, layers: Sequence[int] | None = None) -> StoredRun:
        """Read a run and its features back (hidden states as float32; only ``layers`` if given)."""
        with self.session() as s:
            run = s.get(Run, run_id)
            if run is None:
                raise KeyError(f"no run with id {run_id}")
            prompt = run.prompt.text
        if run.damaged:
            raise DamagedRunError(f"run {run_id}'s features were damaged and are waiting to be regenerated: "
                                  "generate it again (Token entropy page, or the collection that made it) or run "
                                  "`python -m lenscope doctor --fix`")
        try:
            t = self.tensors.get(run.features_hash, None if layers is None else hidden_key_filter(layers))
        except DamagedTensorError as exc:
            if self.read_only:  # reading goes on; marking it waits for write access
                raise DamagedRunError(f"run {run_id}'s {exc} (the store is read-only: nothing was marked)") from exc
            self.mark_damaged(exc.digest)
            raise DamagedRunError(f"run {run_id}'s {exc}; the run is marked for regeneration: generate it again "
                                  "(Token entropy page, or the collection that made it) or run "
                                  "`python -m lenscope doctor --fix`") from exc
        feats = RunFeatures(input_ids=t["input_ids"], tokens=list(run.tokens or []), entropy=t["entropy"],
                                 topk_ids=t["topk_ids"], topk_probs=t["topk_probs"], hidden=unpack_hidden(t))
        return StoredRun(id=run.id, prompt_id=run.prompt_id, prompt=prompt, response=run.response,
                         prompt_len=run.prompt_tokens, output_length=run.output_tokens,
                         finished=run.finished, settings=run.settings, features=feats,
                         content_start=run.content_start or 0, kept_output_ids=t.get("output_ids"))

    def mark_damaged(self, digest: str) -> int:
        """Mark every run whose tensor file is ``digest`` damaged and delete the file; returns how many runs.
        They stop being cache hits, so the next request for them generates them again."""
        with self.session() as s:
            runs = s.scalars(select(Run).where(Run.features_hash == digest)).all()
            for run in runs:
                run.damaged = True
        self.tensors.discard(digest)
        return len(runs)

    def damaged_requests(self) -> list[DamagedRun]:
        """The requests of every run marked damaged, for generating them again."""
        with self.session() as s:
            rows = s.execute(select(Run.id, Run.settings, Run.layers, Prompt.text, Prompt.source, Prompt.source_ref,
                                    ModelRecord.key, ModelRecord.source, ModelRecord.info)
                             .join(Prompt, Prompt.id == Run.prompt_id).join(ModelRecord, ModelRecord.id == Run.model_id)
                             .where(Run.damaged.is_(True)).order_by(Run.id)).all()
        return [DamagedRun(*r[:2], list(r[2]), *r[3:8], (r[8] or {}).get("dtype", "float32")) for r in rows]

    def runs_frame(self, dataset: str | None = None) -> pd.DataFrame:
        """One row per run (optionally of one dataset): ids, prompt, lengths, scenario."""
        cols = [Run.id.label("run_id"), Run.prompt_id, Prompt.text.label("prompt"), Prompt.source, Prompt.source_ref,
                Run.prompt_tokens, Run.output_tokens, Run.finished, Run.model_id, Run.created, Run.feature_positions]
        query = select(*cols).join(Prompt, Prompt.id == Run.prompt_id)
        if dataset is not None:
            query = (select(*cols, DatasetRun.scenario).join(Prompt, Prompt.id == Run.prompt_id)
                     .join(DatasetRun, DatasetRun.run_id == Run.id)
                     .join(Dataset, Dataset.id == DatasetRun.dataset_id).where(Dataset.name == dataset))
        with self.session() as s:
            rows = s.execute(query.order_by(Run.id)).mappings().all()
        return pd.DataFrame([dict(r) for r in rows],
                            columns=[c.name for c in cols] + (["scenario"] if dataset else []))

    # datasets --------------------------------------------------------------------------------
    def ensure_dataset(self, name: str, model: int | ModelShape, config: dict) -> int:
        """Id of dataset ``name`` to store runs of ``model`` (a loaded model, see
        :class:`~lenscope.store.records.ModelShape`, or the id of its row) in, created on first use; its config is kept
        from creation. A dataset holds the runs of one model: one of another model raises
        :class:`lenscope.store.errors.DatasetModelError` naming both, before anything is written (a target's model row
        included), as does a read-only store, and a name that is no dataset name
        (:func:`lenscope.store.names.dataset_name`)."""
        dataset_name(name)
        self.check_dataset(name, model)
        model_id = model if isinstance(model, int) else self.ensure_model(model)
        return self._get_or_create(Dataset, Dataset.name == name,
                                   lambda: Dataset(name=name, model_id=model_id, config=config))

    def check_dataset(self, name: str, model: int | ModelShape) -> None:
        """Raise before a collection of ``model`` (a target, or its row id) into dataset ``name`` writes anything
        when it cannot: :class:`lenscope.store.errors.DatasetModelError` when the dataset holds runs of another model,
        :class:`lenscope.store.errors.StoreReadOnlyError` when the store is read-only."""
        self.require_writable(f"collecting into dataset {name!r}")
        with self.session() as s:
            held = s.execute(select(ModelRecord.key, ModelRecord.source, ModelRecord.info)
                             .join(Dataset, Dataset.model_id == ModelRecord.id).where(Dataset.name == name)).first()
            if held is not None:
                if isinstance(model, int):
                    wanted = s.execute(select(ModelRecord.key, ModelRecord.source, ModelRecord.info)
                                       .where(ModelRecord.id == model)).first()
                else:
                    wanted = (model.key, model.source.spec, {"dtype": model.dtype})
                if wanted is not None and wanted[0] != held[0]:
                    first, second = _model_labels(held, wanted)
                    raise DatasetModelError(f"dataset {name!r} holds runs of {first}; this collection uses {second}: "
                                            "collect into another dataset (--dataset NAME)")

    def dataset_id(self, name: str) -> int | None:
        """Id of dataset ``name``, or None when there is no such dataset."""
        with self.session() as s:
            return s.scalar(select(Dataset.id).where(Dataset.name == name))

    def dataset_config(self, name: str) -> dict | None:
        """The config dataset ``name`` was created with (``{}`` when it has none), or None when there is no such
        dataset."""
        with self.session() as s:
            row = s.execute(select(Dataset.config).where(Dataset.name == name)).first()
        return None if row is None else (row[0] or {})

    def drop_dataset_if_empty(self, dataset_id: int) -> bool:
        """Delete a dataset that holds no run (what a failed first collection leaves); returns whether it did."""
        with self.session() as s:
            if s.scalar(select(DatasetRun.run_id).where(DatasetRun.dataset_id == dataset_id).limit(1)) is not None:
                return False
            s.execute(delete(Dataset).where(Dataset.id == dataset_id))
            return True

    def add_to_dataset(self, dataset_id: int, run_id: int, scenario: str) -> None:
        """Put a run into a dataset (idempotent, also when two clients add it at once)."""
        try:
            with self.session() as s:
                if s.get(DatasetRun, (dataset_id, run_id)) is None:
                    s.add(DatasetRun(dataset_id=dataset_id, run_id=run_id, scenario=scenario))
        except IntegrityError:
            pass

    def datasets_frame(self) -> pd.DataFrame:
        """Datasets with their size and creation time."""
        with self.session() as s:
            rows = s.execute(select(Dataset.id, Dataset.name, Dataset.config, Dataset.created)).all()
            counts = {d: len(s.scalars(select(DatasetRun.run_id).where(DatasetRun.dataset_id == d)).all())
                      for d, *_ in rows}
        return pd.DataFrame([{"dataset_id": r[0], "name": r[1], "runs": counts[r[0]], "config": r[2],
                              "created": r[3]} for r in rows],
                            columns=["dataset_id", "name", "runs", "config", "created"])

    # predictors and predictions -------------------------------------------------------------
    def save_predictor(self, name: str, kind: str, config: dict, metrics: dict, artifact_path: str = "",
                       model_id: int | None = None, dataset_id: int | None = None) -> int:
        """Create or replace predictor ``name`` (its old predictions are dropped); returns its id."""
        with self.session() as s:
            old = s.scalar(select(PredictorRecord).where(PredictorRecord.name == name))
            if old is not None:
                s.execute(delete(Prediction).where(Prediction.predictor_id == old.id))
                s.delete(old)
                s.flush()
            row = PredictorRecord(name=name, kind=kind, config=config, metrics=metrics, artifact_path=artifact_path,
                            model_id=model_id, dataset_id=dataset_id)
            s.add(row)
            s.flush()
            return row.id

    def save_predictions(self, predictor_id: int, frame: pd.DataFrame) -> None:
        """Store rows with columns run_id, step, predicted, true, split."""
        with self.session() as s:
            s.add_all(Prediction(predictor_id=predictor_id, run_id=int(r.run_id), step=int(r.step),
                                 predicted=float(r.predicted), true=float(r.true), split=str(r.split))
                      for r in frame.itertuples())

    def predictors_frame(self, kind: str | None = None) -> pd.DataFrame:
        """Trained predictors with their metrics."""
        query = select(PredictorRecord)
        if kind is not None:
            query = query.where(PredictorRecord.kind == kind)
        with self.session() as s:
            rows = s.scalars(query.order_by(PredictorRecord.id)).all()
        return pd.DataFrame([{"predictor_id": p.id, "name": p.name, "kind": p.kind, "config": p.config,
                              "metrics": p.metrics, "artifact_path": p.artifact_path,
                              "dataset_id": p.dataset_id, "created": p.created} for p in rows],
                            columns=["predictor_id", "name", "kind", "config", "metrics", "artifact_path",
                                     "dataset_id", "created"])

    def predictions_frame(self, predictor_id: int) -> pd.DataFrame:
        """All predictions of one predictor."""
        with self.session() as s:
            rows = s.execute(select(Prediction.run_id, Prediction.step, Prediction.predicted,
                                    Prediction.true, Prediction.split)
                             .where(Prediction.predictor_id == predictor_id)
                             .order_by(Prediction.run_id, Prediction.step)).all()
        return pd.DataFrame(rows, columns=["run_id", "step", "predicted", "true", "split"])

    # traces -------------------------------------------------------------------------------------
    def save_trace(self, name: str, source: str, frame: pd.DataFrame) -> int:
        """Store a trace (columns arrival_s, prompt_tokens, output_tokens, optional run_id and hash_ids) by content."""
        cols = ["arrival_s", "prompt_tokens", "output_tokens"] + (["hash_ids"] if "hash_ids" in frame else [])
        digest = text_hash(frame[cols].to_csv(index=False))
        with self.session() as s:
            row = s.scalar(select(Trace).where(Trace.content_hash == digest))
            if row is not None:
                return row.id
            row = Trace(content_hash=digest, name=name, source=source, n_requests=len(frame))
            s.add(row)
            s.flush()
            run_ids = frame["run_id"] if "run_id" in frame else [None] * len(frame)
            hashes = frame["hash_ids"] if "hash_ids" in frame else [None] * len(frame)
            s.add_all(TraceRequest(trace_id=row.id, idx=i, arrival_s=float(a), prompt_tokens=int(p),
                                   output_tokens=int(o), run_id=None if pd.isna(r) else int(r),
                                   hash_ids=None if h is None else [int(x) for x in h])
                      for i, (a, p, o, r, h) in enumerate(zip(frame["arrival_s"], frame["prompt_tokens"],
                                                              frame["output_tokens"], run_ids, hashes)))
            return row.id

    def traces_frame(self) -> pd.DataFrame:
        """Stored traces."""
        with self.session() as s:
            rows = s.execute(select(Trace.id, Trace.name, Trace.source, Trace.n_requests, Trace.created)).all()
        return pd.DataFrame(rows, columns=["trace_id", "name", "source", "n_requests", "created"])

    def load_trace(self, trace_id: int) -> pd.DataFrame:
        """Requests of a trace in order (with a hash_ids column of tuples when the trace has block hashes)."""
        with self.session() as s:
            rows = s.execute(select(TraceRequest.arrival_s, TraceRequest.prompt_tokens,
                                    TraceRequest.output_tokens, TraceRequest.run_id, TraceRequest.hash_ids)
                             .where(TraceRequest.trace_id == trace_id).order_by(TraceRequest.idx)).all()
        frame = pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens", "run_id", "hash_ids"])
        if frame["hash_ids"].isna().any():
            return frame.drop(columns="hash_ids")
        frame["hash_ids"] = frame["hash_ids"].map(tuple)
        return frame

    # results ------------------------------------------------------------------------------------
    def put_result(self, kind: str, name: str, config: dict, payload: dict) -> int:
        """Store (or replace) the result of an analysis identified by kind + config; two clients storing the
        same result at once (e.g. two browser sessions running one simulation) end up with one row."""
        key = json_key(kind, config)

        def write() -> int:
            with self.session() as s:
                row = s.scalar(select(Result).where(Result.key == key))
                if row is None:
                    row = Result(key=key, kind=kind, name=name, config=config, payload=payload)
                    s.add(row)
                else:
                    row.name, row.payload = name, payload
                s.flush()
                return row.id

        return self._retry_on_conflict(write, f"the {kind} result")

    def memo_tensors(self, kind: str, name: str, config: dict,
                     compute: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Tensors computed once per (kind, config) and kept in the tensor store: ``compute()`` runs on the first
        call, and again only when the kept file is missing or damaged (or on every call, keeping nothing, in a
        read-only store). :meth:`memo` with the tensor codec."""
        return self.memo(kind, config, compute, name=name, codec=_memo.TENSORS)

    def memo(self, kind: str, config: dict, compute: Callable[[], _memo.V], *, name: str,
             version: int | str | None = None, refresh: bool = False, codec: _memo.Codec = _memo.JSON) -> _memo.V:
        """The result of ``kind`` + ``config`` (+ ``version``): stored, else computed once under the key's lock,
        stored as ``name`` and returned (:func:`lenscope.store.memo.memo_entry`; ``refresh`` recomputes it)."""
        return _memo.memo(self, kind, config, compute, name=name, version=version, refresh=refresh, codec=codec)

    def memo_entry(self, kind: str, config: dict, compute: Callable[[], _memo.V], *, name: str,
                   version: int | str | None = None, refresh: bool = False,
                   codec: _memo.Codec = _memo.JSON) -> _memo.Memoised[_memo.V]:
        """:meth:`memo`'s value and whether it was read from the store."""
        return _memo.memo_entry(self, kind, config, compute, name=name, version=version, refresh=refresh,
                                codec=codec)

    def memo_many(self, kind: str, configs: Sequence[dict], compute: Callable[[list[int]], Sequence[_memo.V]], *,
                  names: Sequence[str] | Callable[[int], str], version: int | str | None = None,
                  codec: _memo.Codec = _memo.JSON, batch_size: int | None = None,
                  on_batch: Callable[[int, int], None] | None = None) -> list[_memo.Memoised[_memo.V]]:
        """One result per config, the missing ones computed in batches (:func:`lenscope.store.memo.memo_many`)."""
        return _memo.memo_many(self, kind, configs, compute, names=names, version=version, codec=codec,
                               batch_size=batch_size, on_batch=on_batch)

    def stored(self, kind: str, config: dict, *, version: int | str | None = None,
               codec: _memo.Codec = _memo.JSON):
        """The result stored for ``kind`` + ``config`` (+ ``version``), or None; computes nothing (for views)."""
        return _memo.stored(self, kind, config, version=version, codec=codec)

    def get_result(self, kind: str, config: dict) -> dict | None:
        """Payload of the result stored for kind + config, or None."""
        with self.session() as s:
            row = s.scalar(select(Result).where(Result.key == json_key(kind, config)))
            return None if row is None else row.payload

    def signature(self) -> tuple[int, ...]:
        """Dataset memberships, predictors (count, newest id) and results (count, newest id): changes whenever a
        run, predictor or result is added or a predictor retrained; one cheap query for page-level memos."""
        with self.session() as s:
            return tuple(int(v or 0) for v in s.execute(select(
                select(func.count()).select_from(DatasetRun).scalar_subquery(),
                select(func.count()).select_from(PredictorRecord).scalar_subquery(),
                select(func.max(PredictorRecord.id)).scalar_subquery(),
                select(func.count()).select_from(Result).scalar_subquery(),
                select(func.max(Result.id)).scalar_subquery())).one())

    def results_frame(self, kind: str | None = None) -> pd.DataFrame:
        """Stored results (newest first)."""
        query = select(Result.id, Result.kind, Result.name, Result.config, Result.payload, Result.created)
        if kind is not None:
            query = query.where(Result.kind == kind)
        with self.session() as s:
            rows = s.execute(query.order_by(Result.id.desc())).all()
        return pd.DataFrame(rows, columns=["result_id", "kind", "name", "config", "payload", "created"])

