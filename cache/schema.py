"""ORM tables of the lenscope store."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

SCHEMA_VERSION = 4


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base of every lenscope table."""


class Meta(Base):
    """Key/value facts about the store itself (schema version)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


class ModelRecord(Base):
    """A target model as loaded (source + file + dtype identify it)."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    source: Mapped[str] = mapped_column(String(512))
    num_layers: Mapped[int] = mapped_column(Integer)
    hidden_size: Mapped[int] = mapped_column(Integer)
    info: Mapped[dict] = mapped_column(JSON, default=dict)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Prompt(Base):
    """A user prompt, identified by the hash of its text."""

    __tablename__ = "prompts"
    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(64), default="user")
    source_ref: Mapped[str] = mapped_column(String(256), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Run(Base):
    """One generation of a model for a prompt with given settings (the cache key).

    Per-token arrays (ids, entropy, top-k, hidden states) live in the run's tensor file; ``tokens`` holds the
    readable text of each token as one JSON array.
    """

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id"))
    settings: Mapped[dict] = mapped_column(JSON)
    response: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    finished: Mapped[bool] = mapped_column(Boolean)
    layers: Mapped[list] = mapped_column(JSON)
    features_hash: Mapped[str] = mapped_column(String(64))
    features_path: Mapped[str] = mapped_column(String(512))
    tokens: Mapped[list | None] = mapped_column(JSON, nullable=True)
    # First prompt position of the user's content (after the template's system turn and user header);
    # NULL for runs stored before schema 3, read as 0.
    content_start: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Positions with features when they stop before the answer does (an import that keeps a censored answer's
    # features to its first steps only; its tensor file then holds every answer id too); NULL: every position.
    feature_positions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    duration_s: Mapped[float] = mapped_column(Float)
    # The tensor file failed verification (missing, truncated, altered): the run is no cache hit until a new
    # generation of the same request rewrites it in place (same id). NULL for older rows, read as False.
    damaged: Mapped[bool | None] = mapped_column(Boolean, nullable=True, default=False)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    model: Mapped[ModelRecord] = relationship()
    prompt: Mapped[Prompt] = relationship()


class Dataset(Base):
    """A named collection of runs (what ``lenscope collect`` builds)."""

    __tablename__ = "datasets"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    config: Mapped[dict] = mapped_column(JSON)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class DatasetRun(Base):
    """Membership of a run in a dataset, with the scenario it belongs to."""

    __tablename__ = "dataset_runs"
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    scenario: Mapped[str] = mapped_column(String(64), default="chat")


class PredictorRecord(Base):
    """A trained length predictor (EGTP head, PLP, drafter, probe, baseline)."""

    __tablename__ = "predictors"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id"), nullable=True)
    dataset_id: Mapped[int | None] = mapped_column(ForeignKey("datasets.id"), nullable=True)
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict] = mapped_column(JSON, default=dict)
    artifact_path: Mapped[str] = mapped_column(String(512), default="")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Prediction(Base):
    """A predictor's estimate of the remaining length of a run after ``step`` generated tokens."""

    __tablename__ = "predictions"
    __table_args__ = (UniqueConstraint("predictor_id", "run_id", "step"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    predictor_id: Mapped[int] = mapped_column(ForeignKey("predictors.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[int] = mapped_column(Integer, default=0)
    predicted: Mapped[float] = mapped_column(Float)
    true: Mapped[float] = mapped_column(Float)
    split: Mapped[str] = mapped_column(String(16), default="test")


class Trace(Base):
    """An imported request trace (arrival times with prompt and output token counts)."""

    __tablename__ = "traces"
    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(256))
    source: Mapped[str] = mapped_column(String(64))
    n_requests: Mapped[int] = mapped_column(Integer)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class TraceRequest(Base):
    """One request of a trace; ``run_id`` links requests built from the app's own runs."""

    __tablename__ = "trace_requests"
    trace_id: Mapped[int] = mapped_column(ForeignKey("traces.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    arrival_s: Mapped[float] = mapped_column(Float)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), nullable=True)
    hash_ids: Mapped[list | None] = mapped_column(JSON, nullable=True)  # prompt block hashes (prefix caching)


class Result(Base):
    """Any computed analysis result (evaluation tables, correlations, benchmarks), keyed by content."""

    __tablename__ = "results"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(256))
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    payload: Mapped[dict] = mapped_column(JSON, default=dict)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
