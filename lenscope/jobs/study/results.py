"""One way to read a study's results, wherever they live: :class:`StoreResults` reads a dataset of the store,
:class:`~lenscope.jobs.study.shipped.ShippedStudy` the files shipped under ``data/results``. The tour, the
HTML report and the pages' study sections read through this interface and never ask where the numbers live.

Every getter returns None (an empty frame for tables) when that step has not run.
"""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from lenscope.jobs.drafter.ablation import stored_ablation
from lenscope.jobs.drafter.live import stored_measurement
from lenscope.jobs.drafter.training import drafter_name
from lenscope.jobs.egtp.attribution import stored_evidence
from lenscope.jobs.egtp.heads import PLP_KIND, plp_mae_curve, predictor_name, stored_pooling_ablation
from lenscope.jobs.results.claims import dataset_predictors, stored_claims
from lenscope.jobs.results.crossval import MAX_STEP
from lenscope.jobs.results.leaderboard import benchmark_frame
from lenscope.jobs.runs.datasets import all_runs, dataset_counts
from lenscope.store.store import Store

PRESET_KIND = "study_preset"


def study_layers(store: Store, dataset: str) -> tuple[int, int]:
    """(head layer, probe layer) of a study on ``dataset``: the last recorded layer (the target's last) and
    half of it, as :func:`study_steps` trains them."""
    config = store.dataset_config(dataset)
    if config is None:
        raise ValueError(f"no dataset {dataset!r} in the store; run `python -m lenscope study` first")
    layer = max(config.get("layers") or [30])
    return layer, layer // 2


def preset_config(store: Store, dataset: str) -> dict:
    """The preset replays the OUTLETS drafter's predictions; a retrained drafter (a new id) needs a new run, and so
    do other seeds or workloads."""
    from lenscope.jobs.scheduler.replay import PRESET_SEEDS, WORKLOADS

    drafter = dataset_predictors(store, dataset).get(drafter_name(dataset, "outlets"))
    return {"dataset": dataset, "predictor_id": drafter, "seeds": PRESET_SEEDS, "workloads": list(WORKLOADS)}


def stored_preset(store: Store, dataset: str) -> dict | None:
    """The scheduler preset kept for ``dataset`` and its OUTLETS drafter as it is now, or None (nothing is run)."""
    return store.stored(PRESET_KIND, preset_config(store, dataset))


class StudyResults(Protocol):
    """What every view of a study reads."""

    dataset: str
    layer: int
    probe_layer: int

    def caption(self) -> str: ...
    def runs(self) -> pd.DataFrame: ...
    def claims(self) -> dict | None: ...
    def evidence(self) -> tuple[dict, dict] | None: ...
    def pooling_ablation(self) -> dict | None: ...
    def plp_curve(self) -> pd.DataFrame | None: ...
    def predictors(self) -> pd.DataFrame: ...
    def results_frame(self) -> pd.DataFrame: ...
    def drafter_ablation(self) -> dict | None: ...
    def speculative(self) -> tuple[dict, dict] | None: ...
    def preset(self) -> dict | None: ...


def claims_table(results: StudyResults, scenario: str | None = None) -> pd.DataFrame | None:
    """The judged claims (of one scenario's table when given) as a frame, or None."""
    payload = results.claims()
    if payload is None:
        return None
    rows = payload["claims"] if scenario is None else payload.get("by_scenario", {}).get(scenario)
    return None if rows is None else pd.DataFrame(rows)


class StoreResults:
    """The results of ``dataset`` as the store holds them now (nothing is computed); heads at ``layer`` and the
    probe at ``probe_layer`` (default: the study's)."""

    def __init__(self, store: Store, dataset: str, layer: int | None = None, probe_layer: int | None = None) -> None:
        self.store, self.dataset = store, dataset
        layers = study_layers(store, dataset) if layer is None or probe_layer is None else (layer, probe_layer)
        self.layer = layers[0] if layer is None else layer
        self.probe_layer = layers[1] if probe_layer is None else probe_layer

    def caption(self) -> str:
        return f"Dataset {self.dataset!r}: {dataset_counts(self.store, self.dataset).caption()}"

    def runs(self) -> pd.DataFrame:
        return all_runs(self.store, self.dataset)

    def claims(self) -> dict | None:
        return stored_claims(self.store, self.dataset)

    def evidence(self) -> tuple[dict, dict] | None:
        return stored_evidence(self.store, self.dataset, self.layer)

    def pooling_ablation(self) -> dict | None:
        return stored_pooling_ablation(self.store, self.dataset, self.layer)

    def plp_curve(self) -> pd.DataFrame | None:
        frame = self.predictors()
        row = frame[frame["name"] == predictor_name(PLP_KIND, self.dataset, self.layer)]
        return None if row.empty else plp_mae_curve(self.store, int(row["predictor_id"].iloc[0]))

    def predictors(self) -> pd.DataFrame:
        frame = self.store.predictors_frame()
        return frame[frame["dataset_id"] == self.store.dataset_id(self.dataset)].reset_index(drop=True)

    def results_frame(self) -> pd.DataFrame:
        """Every predictor's rows on the test split, steps 0..32 (what is shipped of the leaderboard)."""
        frame = benchmark_frame(self.store, self.dataset)
        return frame[(frame["split"] == "test") & (frame["step"] <= MAX_STEP)].reset_index(drop=True)

    def drafter_ablation(self) -> dict | None:
        return stored_ablation(self.store, self.dataset)

    def speculative(self) -> tuple[dict, dict] | None:
        return stored_measurement(self.store, self.dataset)

    def preset(self) -> dict | None:
        return stored_preset(self.store, self.dataset)
