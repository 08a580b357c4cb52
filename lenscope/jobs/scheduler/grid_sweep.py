"""Simulation grids: QPS x policy x predictor x noise x seed, every point memoised in the store, the missing
ones simulated in this process or fanned out as Ray tasks (the same results either way).

A point re-times the trace as a Poisson process at its QPS (seeded by the point's seed), which also seeds the
predictor's noise. The driver builds each point's predictor (trained predictors need the store) and stores what
the tasks return, so workers need neither the store nor the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pandas as pd

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.scheduler.engine import SimConfig
from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.runs.ray_cluster import RayOptions, ray_map
from lenscope.jobs.scheduler.replay import (
    RESULT_KIND,
    Outcome,
    PredictorSpec,
    build_predictor,
    policy_label,
    result_key,
    simulation_payload,
)
from lenscope.store.store import Store

GRID_METRICS = ("mean_jct_s", "all_e2e_p50_s", "all_e2e_p99_s", "short_e2e_p99_s", "all_ttft_p99_s",
                "throughput_tok_s")


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a grid; ``maes`` are the noise levels of ``oracle-noise`` predictors (others have none)."""

    qps: tuple[float, ...]
    policies: tuple[tuple[str, str], ...]
    predictors: tuple[PredictorSpec, ...] = (PredictorSpec(),)
    maes: tuple[float, ...] = (0.0,)
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if not (self.qps and self.policies and self.predictors and self.maes and self.seeds):
            raise ValueError("every axis of a sweep needs at least one value")
        if min(self.qps) <= 0 or min(self.maes) < 0:
            raise ValueError("QPS values must be positive and noise levels non-negative")

    def points(self) -> list[tuple[float, tuple[str, str], PredictorSpec, int]]:
        """(qps, policy, predictor with its noise and seed, seed) for every point, in table order."""
        out = []
        for seed in self.seeds:
            for qps in self.qps:
                for spec in self.predictors:
                    noisy = [replace(spec, mae=m) for m in self.maes] if spec.kind == "oracle-noise" else [spec]
                    for s in noisy:
                        out += [(qps, policy, replace(s, seed=seed), seed) for policy in self.policies]
        return out


def grid_outcomes(store: Store, trace: pd.DataFrame, base: SimConfig, grid: SweepGrid, short_quantile: float = 0.5,
                  ray: RayOptions | None = None, on_progress: Progress = no_progress) -> list[Outcome]:
    """The outcome of every point of ``grid`` (in :meth:`SweepGrid.points` order): stored ones read back, the
    others simulated here or, with ``ray``, as Ray tasks, then stored."""
    points = grid.points()
    timed = {(qps, seed): poisson_retime(trace, qps, seed) for qps, _, _, seed in points}
    jobs, outcomes, todo = [], [None] * len(points), []
    for i, (qps, (dispatch, queue), spec, seed) in enumerate(points):
        config = base.with_(dispatch=dispatch, queue=queue)
        key = result_key(timed[qps, seed], spec, config, short_quantile)
        payload = store.get_result(RESULT_KIND, key)
        if payload is not None:
            outcomes[i] = Outcome.from_payload(payload, cached=True)
            continue
        todo.append((i, key, config, spec))
        jobs.append((timed[qps, seed], build_predictor(store, spec, timed[qps, seed]), config, short_quantile,
                     spec.label()))
    done = len(points) - len(todo)
    on_progress(done, len(points), "sweep points")

    def report(finished: int) -> None:
        on_progress(done + finished, len(points), "sweep points")

    if ray is None:
        payloads = []
        for job in jobs:
            payloads.append(simulation_payload(*job))
            report(len(payloads))
    else:
        payloads = ray_map(simulation_payload, jobs, ray, on_result=report)
    for (i, key, config, spec), payload in zip(todo, payloads):
        store.put_result(RESULT_KIND, f"{config.label()} | {spec.label()}", key, payload)
        outcomes[i] = Outcome.from_payload(payload, cached=False)
    return outcomes


def grid_table(grid: SweepGrid, outcomes: Sequence[Outcome]) -> pd.DataFrame:
    """One row per point: its axes and headline metrics."""
    rows = []
    for (qps, (dispatch, queue), spec, seed), outcome in zip(grid.points(), outcomes):
        rows.append({"qps": qps, "policy": policy_label(dispatch, queue), "predictor": spec.label(), "seed": seed,
                     **{m: outcome.summary[m] for m in GRID_METRICS}})
    return pd.DataFrame(rows)
