"""A dataset's runs with their split, the split metrics are reported on, and what a training job returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.core.splits import split_of
from cache.store import Store


def dataset_runs(store: Store, dataset: str) -> pd.DataFrame:
    """Runs of ``dataset`` with their prompt split; a clear error when it does not exist or is empty."""
    runs = store.runs_frame(dataset)
    if runs.empty:
        raise ValueError(f"dataset {dataset!r} has no runs; create it with "
                         f"`python -m lenscope collect --dataset {dataset}`")
    return runs.assign(split=[split_of(pid) for pid in runs["prompt_id"]])


def evaluation_split(splits: Sequence[str]) -> str:
    """The split metrics are reported on: test, else val, else train (tiny datasets)."""
    present = set(splits)
    return next(s for s in ("test", "val", "train") if s in present)


@dataclass
class JobResult:
    """A registered predictor and its headline metrics."""

    predictor_id: int
    name: str
    metrics: dict
