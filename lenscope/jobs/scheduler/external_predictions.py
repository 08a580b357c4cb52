"""Prediction files of external predictors: read, checked and evaluated once, then kept in the store.

:func:`import_predictions` stores a file's pairs and evaluation once (an ``external_predictions`` result,
:meth:`lenscope.store.store.Store.memo`) under a digest of its bytes and of how it was read. That digest names the
file in the empirical predictor's options (:class:`lenscope.jobs.scheduler.predictor_spec.PredictorSpec`): it is
rebuilt from the store (:func:`stored_pairs`), and simulations with it are cached per file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from lenscope.analysis.scheduler.external_predictions import (
    PredictionEvaluation,
    PredictionPairs,
    PredictionsFormat,
    evaluate_predictions,
    load_predictions_file,
)
from lenscope.analysis.scheduler.traces import MAX_ROWS, MAX_UPLOAD_BYTES, read_bytes
from lenscope.store.store import Store

RESULT_KIND = "external_predictions"


@dataclass(frozen=True)
class ImportedPredictions:
    """A predictions file in the store: its digest (the empirical predictor's ``predictions`` option), pairs and
    evaluation, and whether the store already held it."""

    key: str
    pairs: PredictionPairs
    evaluation: PredictionEvaluation
    cached: bool


def import_predictions(store: Store, source: Path | bytes, fmt: PredictionsFormat = PredictionsFormat(),
                       name: str = "predictions") -> ImportedPredictions:
    """Read, check and evaluate a predictions file, or fetch it from the store when the same bytes were read the same
    way before: a path is read whole (any file that fits in memory: a regular file of at most
    :func:`lenscope.analysis.core.safe_files.disk_limit` bytes, a share of the memory available, and no row limit),
    bytes (a browser upload) within the upload limits, :data:`MAX_UPLOAD_BYTES` and :data:`MAX_ROWS` rows. Messages name
    the file by its path, or by ``name`` for bytes."""
    on_disk = isinstance(source, Path)
    max_bytes, max_rows, label = (None, None, str(source)) if on_disk else (MAX_UPLOAD_BYTES, MAX_ROWS, name)
    data = read_bytes(source, max_bytes, "predictions", label)  # a path: a regular file within disk_limit()
    digest = hashlib.sha256(data)  # = sha256(data + format), without a copy of the data
    digest.update(json.dumps(asdict(fmt), sort_keys=True).encode())
    key = digest.hexdigest()

    def evaluate() -> dict:
        pairs = load_predictions_file(data, fmt, max_bytes, max_rows, label)
        return {"pairs": pairs.to_dict(), "evaluation": evaluate_predictions(pairs).to_dict()}

    payload, cached = store.memo_entry(RESULT_KIND, {"key": key}, evaluate, name=name)
    return ImportedPredictions(key, PredictionPairs.from_dict(payload["pairs"]),
                               PredictionEvaluation.from_dict(payload["evaluation"]), cached)


def stored_pairs(store: Store, key: str | None) -> PredictionPairs:
    """The pairs of an imported predictions file, by its digest."""
    payload = None if key is None else store.stored(RESULT_KIND, {"key": key})
    if payload is None:
        raise ValueError("no imported predictions file " + (f"{key[:12]}" if key else "chosen") + "; import one "
                         "with `--predictions PATH` or the playground's upload")
    return PredictionPairs.from_dict(payload["pairs"])
