"""QPS sweep: the latency-vs-load curve of several dispatch+queue policies on one trace, and where each saturates.

Every point replays the trace's requests re-timed as a Poisson process at that QPS (seeded), a point of the grid
sweep (:mod:`lenscope.jobs.scheduler.grid_sweep`), so each point is memoised in the store. A point is *saturated* when
the backlog keeps growing while requests arrive (:func:`lenscope.analysis.scheduler.metrics.backlog_growth`, requests in
the system found by the last quarter of arrivals over those found by the second quarter, above
:data:`SATURATION_GROWTH`) and the cluster serves less than
:data:`SATURATION_SERVED` of the offered rate (:func:`lenscope.analysis.scheduler.metrics.served_fraction`). Either
alone misfires on finite runs: the backlog growth on the random swings of a queue near (but under) its capacity, the
served fraction on short traces of long requests.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.scheduler.engine import QPS, SimConfig
from lenscope.analysis.scheduler.metrics import backlog_growth, served_fraction
from lenscope.analysis.scheduler.registry import DISPATCH_POLICIES, QUEUE_POLICIES
from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.runs.ray_cluster import RayOptions
from lenscope.jobs.scheduler.grid_sweep import GRID_METRICS, SweepGrid, grid_outcomes
from lenscope.jobs.scheduler.replay import PredictorSpec, policy_label, saturating_qps
from lenscope.store.store import Store

SATURATION_GROWTH = 1.25
SATURATION_SERVED = 0.9
LOAD_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)  # default sweep, in units of the estimated capacity


def parse_policies(text: str) -> list[tuple[str, str]]:
    """``dispatch+queue`` pairs from comma-separated text such as ``rr+fcfs,lb+sjf``."""
    pairs = []
    for part in (p.strip().lower() for p in text.split(",") if p.strip()):
        dispatch, sep, queue = part.partition("+")
        if not sep or dispatch not in DISPATCH_POLICIES or queue not in QUEUE_POLICIES:
            raise ValueError(f"policies are DISPATCH+QUEUE pairs (dispatch {', '.join(DISPATCH_POLICIES.names())}; "
                             f"queue {', '.join(QUEUE_POLICIES.names())}), not {part!r}")
        pairs.append((dispatch, queue))
    if not pairs:
        raise ValueError("give at least one DISPATCH+QUEUE policy pair")
    return pairs


def parse_qps(text: str) -> list[float]:
    """Positive QPS values from comma-separated numbers, sorted (NaN, infinite or non-positive ones refused)."""
    try:
        values = sorted({float(q) for q in QPS.parse_list(text)})
    except ValueError as exc:
        raise ValueError(f"QPS values: {exc}") from None
    if not values:
        raise ValueError("give at least one QPS value")
    return values


def default_qps(trace: pd.DataFrame, config: SimConfig) -> list[float]:
    """:data:`LOAD_FACTORS` times the cluster's estimated capacity for this trace's lengths (3 significant digits)."""
    capacity = saturating_qps(trace, config, factor=1.0)
    return [float(f"{f * capacity:.3g}") for f in LOAD_FACTORS]


def qps_sweep(store: Store, trace: pd.DataFrame, spec: PredictorSpec, base: SimConfig,
              policies: list[tuple[str, str]], qps_values: list[float], seed: int = 0, short_quantile: float = 0.5,
              on_progress: Progress = no_progress, ray: RayOptions | None = None) -> pd.DataFrame:
    """One row per (policy, QPS): the headline latencies, throughput, latency growth and whether it saturated
    (the points of a :class:`SweepGrid` with one predictor and one seed; ``ray`` fans them out)."""
    grid = SweepGrid(qps=tuple(qps_values), policies=tuple(policies), predictors=(spec,), maes=None, seeds=(seed,))
    windows = {qps: np.ptp(poisson_retime(trace, qps, seed)["arrival_s"].to_numpy()) for qps in grid.qps}
    rows = []
    for (qps, (dispatch, queue), _, _), outcome in zip(grid.points(), grid_outcomes(
            store, trace, base, grid, short_quantile, ray, on_progress)):
        growth = backlog_growth(outcome.requests)
        served = served_fraction(float(windows[qps]), outcome.summary["makespan_s"])
        rows.append({"policy": policy_label(dispatch, queue), "qps": qps,
                     **{m: outcome.summary[m] for m in GRID_METRICS}, "backlog_growth": growth,
                     "served_fraction": served,
                     "saturated": growth > SATURATION_GROWTH and served < SATURATION_SERVED})
    return pd.DataFrame(rows).sort_values(["policy", "qps"], kind="stable").reset_index(drop=True)


def saturation_points(sweep: pd.DataFrame) -> dict[str, float | None]:
    """Per policy: the lowest swept QPS that saturated it (None: none did)."""
    out = {}
    for policy, rows in sweep.groupby("policy", sort=False):
        saturated = rows.loc[rows["saturated"], "qps"]
        out[policy] = float(saturated.min()) if len(saturated) else None
    return out


def saturation_text(points: dict[str, float | None], qps_values: list[float]) -> list[str]:
    """One line per policy saying where it saturates."""
    top = float(np.max(qps_values))
    return [f"{policy}: saturates at {qps:g} QPS" if qps is not None else f"{policy}: keeps up to {top:g} QPS"
            for policy, qps in points.items()]
