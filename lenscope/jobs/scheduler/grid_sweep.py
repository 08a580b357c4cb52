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

NOISE = "mae"  # the option the noise axis varies
GRID_METRICS = ("mean_jct_s", "all_e2e_p50_s", "all_e2e_p99_s", "short_e2e_p99_s", "all_ttft_p99_s",
                "throughput_tok_s")


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a grid; ``maes`` are the noise levels of the predictors with a noise option (:data:`NOISE`;
    others have none), None keeps each predictor's own."""

    qps: tuple[float, ...]
    policies: tuple[tuple[str, str], ...]
    predictors: tuple[PredictorSpec, ...] = (PredictorSpec(),)
    maes: tuple[float, ...] | None = (0.0,)
    seeds: tuple[int, ...] = (0,)

    def __post_init__(self) -> None:
        if not (self.qps and self.policies and self.predictors and self.maes != () and self.seeds):
            raise ValueError("every axis of a sweep needs at least one value")
        if min(self.qps) <= 0 or min(self.maes or (0.0,)) < 0:
            raise ValueError("QPS values must be positive and noise levels non-negative")

    def points(self) -> list[tuple[float, tuple[str, str], PredictorSpec, int]]:
        """(qps, policy, predictor with its noise and seed, seed) for every point, in table order."""
        out = []
        for seed in self.seeds:
            for qps in self.qps:
                for spec in self.predictors:
                    noisy = ([spec.with_options(**{NOISE: m}) for m in self.maes]
                             if self.maes is not None and spec.takes(NOISE) else [spec])
                    for s in noisy:
                        out += [(qps, policy, replace(s, seed=seed), seed) for policy in self.policies]
        return out


def grid_outcomes(store: Store, trace: pd.DataFrame, base: SimConfig, grid: SweepGrid, short_quantile: float = 0.5,
                  ray: RayOptions | None = None, on_progress: Progress = no_progress) -> list[Outcome]:
    """The outcome of every point of ``grid`` (in :meth:`SweepGrid.points` order): stored ones read back, the
    others simulated here or, with ``ray``, as Ray tasks, then stored."""
    points = grid.points()
    timed = {(qps, seed): poisson_retime(trace, qps, seed) for qps, _, _, seed in points}
    configs = [base.with_(dispatch=dispatch, queue=queue) for _, (dispatch, queue), _, _ in points]
    keys = [result_key(timed[qps, seed], spec, config, short_quantile)
            for (qps, _, spec, seed), config in zip(points, configs)]

    def simulate_missing(positions: list[int]) -> list[dict]:
        done = len(points) - len(positions)
        on_progress(done, len(points), "sweep points")

        def report(finished: int) -> None:
            on_progress(done + finished, len(points), "sweep points")

        jobs = []
        for i in positions:
            qps, _, spec, seed = points[i]
            jobs.append((timed[qps, seed], build_predictor(store, spec, timed[qps, seed]), configs[i], short_quantile,
                         spec.label()))
        if ray is not None:
            return ray_map(simulation_payload, jobs, ray, on_result=report)
        payloads = []
        for job in jobs:
            payloads.append(simulation_payload(*job))
            report(len(payloads))
        return payloads

    kept = store.memo_many(RESULT_KIND, keys, simulate_missing,
                           names=lambda i: f"{configs[i].label()} | {points[i][2].label()}")
    if all(entry.cached for entry in kept):
        on_progress(len(points), len(points), "sweep points")
    return [Outcome.from_payload(entry.value, entry.cached) for entry in kept]


def grid_table(grid: SweepGrid, outcomes: Sequence[Outcome]) -> pd.DataFrame:
    """One row per point: its axes and headline metrics."""
    rows = []
    for (qps, (dispatch, queue), spec, seed), outcome in zip(grid.points(), outcomes):
        rows.append({"qps": qps, "policy": policy_label(dispatch, queue), "predictor": spec.label(), "seed": seed,
                     **{m: outcome.summary[m] for m in GRID_METRICS}})
    return pd.DataFrame(rows)
