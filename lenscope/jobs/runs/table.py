"""A dataset's runs as one table for notebooks and other tools: pandas, Hugging Face ``datasets``, Parquet.

One row per run with its prompt (and answer) text, token lengths, whether it finished, and the conversation
task, leak group, cross-validation fold and train/val/test split exactly as every page and predictor computes
them (:func:`lenscope.jobs.runs.datasets.with_splits`). The table comes from a store dataset (:func:`runs_table`)
or, on a fresh clone whose store is empty, from a shipped generations file (:func:`generations_table`), read
without a store and without loading the model; :func:`load_runs` picks the first that exists.

A file's split equals the store's when the store dataset holds the same runs (``import-generations`` of the
whole file, or ``export-generations`` of the dataset): leak groups link prompts among the runs at hand, so a
dataset holding only some of a file's runs may group (and split) a contained prompt differently.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from sqlalchemy import select

from lenscope.jobs.runs.datasets import all_runs, with_splits
from lenscope.jobs.runs.generation_records import check_generations, check_records
from lenscope.jobs.runs.generations import read_generations
from lenscope.models.atomic_files import atomic_path
from lenscope.store.names import dataset_name
from lenscope.store.schema import Dataset, DatasetRun, Run
from lenscope.store.settings import APP_ROOT, SHIPPED_DATA
from lenscope.store.store import Store

# The full study's generations, shipped with the repository (dataset ``study``).
SHIPPED_STUDY = SHIPPED_DATA / "generations" / "study-generations.jsonl.gz"
SHIPPED_DATASET = "study"
# The columns both tables share, in order; a store table starts with run_id and prompt_id, a file's with row.
COLUMNS = ("prompt", "answer", "source", "source_ref", "scenario", "prompt_tokens", "output_tokens", "finished",
           "censored", "task", "group", "fold", "split")
STORE_IDS = ("run_id", "prompt_id")
FILE_IDS = ("row",)
EXPORT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def _typed(frame: pd.DataFrame, ids: tuple[str, ...]) -> pd.DataFrame:
    out = frame.loc[:, [*ids, *COLUMNS]].reset_index(drop=True)
    ints = [*ids, "prompt_tokens", "output_tokens", "fold"]
    return out.astype({**dict.fromkeys(ints, "int64"), "finished": bool, "censored": bool})


def runs_table(store: Store, dataset: str) -> pd.DataFrame:
    """Every run of store dataset ``dataset``, censored ones included, one row each: ``run_id``, ``prompt_id``,
    ``prompt`` (text), ``answer`` (the stored answer text), ``source``, ``source_ref``, ``scenario``,
    ``prompt_tokens``, ``output_tokens``, ``finished``, ``censored`` (hit the token cap: its true length is
    unknown), ``task``, ``group``, ``fold`` and ``split``, the last four from
    :func:`lenscope.jobs.runs.datasets.all_runs` (the split every page reports). Errors when the dataset has no runs."""
    runs = all_runs(store, dataset)
    with store.session() as s:
        answers = dict(s.execute(select(Run.id, Run.response).join(DatasetRun, DatasetRun.run_id == Run.id)
                                 .join(Dataset, Dataset.id == DatasetRun.dataset_id)
                                 .where(Dataset.name == dataset)).all())
    return _typed(runs.assign(answer=runs["run_id"].map(answers)), STORE_IDS)


def answer_model(header: dict):
    """The model a generations file's ``header`` names, loaded on the CPU: its tokenizer decodes the answers, and its
    vocabulary, context and end tokens check the records as ``import-generations`` does."""
    from lenscope.models.target import TargetModel

    return TargetModel.load(header.get("model"), device="cpu")


def generations_table(path: Path | str, decode_answers: bool = False) -> pd.DataFrame:
    """The runs of generations file ``path`` (``export-generations``; e.g. :data:`SHIPPED_STUDY`) as
    :func:`runs_table` gives a store's, without a store: ``row`` (the record's 0-based position in the file)
    instead of the database ids, split by the same :func:`lenscope.jobs.runs.datasets.with_splits`. The file holds
    answer token ids, not text: ``answer`` is None unless ``decode_answers`` (off by default: it loads the model
    the file's header names, for its tokenizer) decodes them as an import stores them. ``frame.attrs`` holds the
    header's ``dataset`` and ``model``. Every record first passes the checks of ``import-generations``: all of them
    with ``decode_answers`` (:func:`~lenscope.jobs.runs.generation_records.check_generations`, on the loaded model),
    else those that need no model (:func:`~lenscope.jobs.runs.generation_records.check_records`); a ValueError
    names the first record that fails."""
    header, records = read_generations(Path(path))
    if not records:
        raise ValueError(f"{path} holds no runs")
    tokenizer = None
    if decode_answers:
        model = answer_model(header)
        check_generations(model, Path(path).name, header, records)
        tokenizer = model.tokenizer
    else:
        check_records(Path(path).name, records)
    frame = pd.DataFrame({
        "row": range(len(records)),
        "prompt": [r["prompt"] for r in records],
        "answer": [tokenizer.decode(r["output_ids"], skip_special_tokens=True) if tokenizer is not None else None
                   for r in records],
        "source": [r["source"] for r in records],
        "source_ref": [r["ref"] for r in records],
        "scenario": [r["scenario"] for r in records],
        "prompt_tokens": [len(r["prompt_ids"]) for r in records],
        "output_tokens": [len(r["output_ids"]) for r in records],
        "finished": [r["finished"] for r in records],
    })
    table = _typed(with_splits(frame), FILE_IDS)
    table.attrs.update(dataset=header.get("dataset"), model=header.get("model"))
    return table


def load_runs(dataset: str = SHIPPED_DATASET, store: Store | None = None, decode_answers: bool = False
              ) -> pd.DataFrame:
    """The runs of ``dataset``: :func:`runs_table` when the store (default: ``Store()``, the app's) has runs in
    it, else for ``study`` :func:`generations_table` of the shipped :data:`SHIPPED_STUDY` (a fresh clone; its
    answer texts only with ``decode_answers``, which loads the model), else a ValueError naming the store's
    datasets. ``frame.attrs["origin"]`` says which it read. ``dataset`` must be a dataset name
    (:func:`lenscope.store.names.dataset_name`)."""
    dataset = dataset_name(dataset)
    store = store if store is not None else Store()
    stored = store.datasets_frame().set_index("name")["runs"]
    if stored.get(dataset, 0) > 0:
        table = runs_table(store, dataset)
        table.attrs["origin"] = f"store dataset {dataset!r}"
        return table
    if dataset == SHIPPED_DATASET and SHIPPED_STUDY.is_file():
        table = generations_table(SHIPPED_STUDY, decode_answers)
        table.attrs["origin"] = f"shipped generations file {SHIPPED_STUDY.relative_to(APP_ROOT)}"
        return table
    have = ", ".join(f"{name} ({n} runs)" for name, n in stored.items()) or "none"
    raise ValueError(f"the store has no runs in dataset {dataset!r} (its datasets: {have}); only "
                     f"{SHIPPED_DATASET!r} falls back to the shipped generations file")


def to_hf_dataset(frame: pd.DataFrame):
    """``frame`` as a Hugging Face :class:`datasets.Dataset` (same columns and rows, no index column). Needs the
    ``datasets`` package (``pip install datasets==5.2.0``)."""
    try:
        import datasets
    except ImportError as exc:
        raise ImportError("a Hugging Face Dataset needs the `datasets` package: pip install datasets==5.2.0") from exc
    return datasets.Dataset.from_pandas(frame, preserve_index=False)


def export_format(path: Path | str) -> str:
    """The format :func:`export_runs` writes ``path`` in, from its suffix: ``parquet``, ``csv`` or ``jsonl`` (a
    ValueError for any other)."""
    suffix = Path(path).suffix.lower()
    if suffix not in EXPORT_SUFFIXES:
        raise ValueError(f"cannot write runs to {Path(path).name!r}: give a file ending in "
                         f"{', '.join(EXPORT_SUFFIXES)}")
    return suffix[1:]


def export_runs(frame: pd.DataFrame, path: Path | str) -> Path:
    """Write ``frame`` to ``path`` by its suffix: ``.parquet`` (needs pyarrow), ``.csv`` or ``.jsonl`` (one JSON
    object per line); another suffix is a ValueError (before anything is written). The file is written all or
    nothing (:func:`~lenscope.models.atomic_files.atomic_path`). Returns the path."""
    path = Path(path)
    fmt = export_format(path)
    with atomic_path(path) as temporary:
        if fmt == "parquet":
            frame.to_parquet(temporary, index=False)
        elif fmt == "csv":
            frame.to_csv(temporary, index=False)
        else:
            frame.to_json(temporary, orient="records", lines=True, force_ascii=False)
    return path
