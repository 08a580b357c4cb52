"""lenscope from Python: length predictions for new prompts, a study's runs as a DataFrame, a Hugging Face
``datasets.Dataset`` or a Parquet file, and the study's shipped results.

    from lenscope.api import load_predictor, load_runs
    egtp = load_predictor("egtp")                 # shipped with lenscope: nothing to train
    egtp.predict(["Write a haiku about rain."])   # DataFrame: id, predicted_tokens, q10/q50/q90_tokens, ...
    runs = load_runs("study")                     # text, lengths, finished, censored, split, scenario, ...

Every function works on a fresh clone with an empty store (the shipped files), and on a store's datasets when
one is named.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from lenscope.jobs.predictors.catalog import CATALOG, entry, load_predictor_files, predictor_list, shipped_summary
from lenscope.jobs.predictors.predict import LengthPredictor, predict_prompts, prompt_table
from lenscope.jobs.runs.table import export_runs, load_runs, to_hf_dataset
from lenscope.jobs.study.shipped import ShippedStudy, shipped_study
from lenscope.models.target import TargetModel
from lenscope.store.names import dataset_name
from lenscope.store.store import Store

__all__ = ["CATALOG", "LengthPredictor", "ShippedStudy", "export_runs", "load_model", "load_predictor", "load_runs",
           "predict", "runs_dataset", "shipped_predictors", "shipped_results", "to_hf_dataset"]


def load_model(model: str = "", device: str = "auto", dtype: str = "float32") -> TargetModel:
    """The target model: a local checkpoint folder, a .gguf file or a hub id ("": the embedded SmolLM2-135M)."""
    return TargetModel.load(model, device=device, dtype=dtype)


def load_predictor(name: str = "egtp", dataset: str | None = None, target: TargetModel | None = None,
                   store: Store | None = None) -> LengthPredictor:
    """Predictor ``name`` (one of :data:`CATALOG`: egtp, mean, max, last, plp, probe, drafter, constant), the
    shipped one, or the one trained on ``dataset`` of the store when given; on ``target`` (default: the model it
    was trained on, loaded now). Its ``predict(prompts)`` returns a DataFrame; ``manifest`` says what it is. Its
    files are checked against the hashes its manifest (or store row) records before anything loads."""
    entry(name)
    files = load_predictor_files(name, store, None if dataset is None else dataset_name(dataset))
    return LengthPredictor(files, target or load_model(files.model))


def predict(prompts: Iterable[str] | pd.DataFrame, predictors: str | Iterable[str] = ("egtp",),
            dataset: str | None = None, target: TargetModel | None = None) -> pd.DataFrame:
    """Several predictors at once on one forward pass per prompt: one row per (prompt, predictor). ``prompts``:
    any iterable of texts (read once) or a DataFrame with a ``prompt`` column and optionally ``id`` (ids default
    to the row's 1-based number and must be unique); ``predictors``: one name or several. The prompts and names
    are checked before any model loads (TypeError for a bare string or other types, ValueError for bad values)."""
    names = predictor_list(predictors)
    frame = prompt_table(prompts)
    loaded = [load_predictor(names[0], dataset, target)]
    target = loaded[0].target
    loaded += [load_predictor(n, dataset, target) for n in names[1:]]
    return predict_prompts(target, frame, loaded)


def runs_dataset(dataset: str = "study", store: Store | None = None):
    """A dataset's runs (:func:`load_runs`) as a Hugging Face ``datasets.Dataset``."""
    return to_hf_dataset(load_runs(dataset, store))


def shipped_results() -> ShippedStudy | None:
    """The study's results shipped under data/results (claims, out-of-fold predictions, evidence, preset ...)."""
    return shipped_study()


def shipped_predictors() -> pd.DataFrame:
    """The shipped predictors with their test metrics (from their manifests)."""
    return shipped_summary()

