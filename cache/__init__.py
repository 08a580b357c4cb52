"""SQLAlchemy-backed store of models, prompts, runs, token features, predictors, predictions,
traces and results. SQLite file by default, any SQLAlchemy URL (e.g. PostgreSQL) by setting."""

from lenscope.store.store import Store, StoredRun

__all__ = ["Store", "StoredRun"]
