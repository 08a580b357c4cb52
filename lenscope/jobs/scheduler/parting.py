"""Where compared configurations part: the load at which their headline numbers stop tying, measured by simulation.

Length-aware policies reorder only the decode queues, so they part once requests wait there. The search replays the
trace re-timed as a Poisson process (seeded) at multiples of the decode stage's estimated capacity
(:func:`lenscope.jobs.scheduler.replay.stage_capacity`) above its current rate, lowest first, and stops at the first
load where the configurations no longer tie (:func:`lenscope.analysis.scheduler.bottleneck.headline_tie`). A cluster
whose prefill stage would saturate first gets prefill instances enough for the decode stage to be the tighter one
(raising the load alone would only lengthen the prefill queue). Every point is memoised in the store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.scheduler.bottleneck import StageReading, headline_tie, tie_reason
from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.scheduler.replay import Outcome, PredictorSpec, SimConfig, run_simulation, stage_capacity
from lenscope.store.store import Store

PART_FACTORS = (0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0)  # loads tried, in units of the decode stage's estimated capacity
ABOVE_CURRENT = 1.05  # only loads above the trace's current rate by this factor are tried
PREFILL_HEADROOM = 1.25  # prefill capacity wanted over the decode stage's, when prefill would saturate first
MAX_PREFILL = 16  # the playground's bound on prefill instances


@dataclass
class Parting:
    """The search's outcome: the load where the configurations part (None: none tried did), the prefill instances it
    used, the loads tried, the outcomes at the last one and a sentence saying what was measured."""

    qps: float | None
    n_prefill: int
    tried: list[float]
    outcomes: list[Outcome]
    note: str


def offered_qps(trace: pd.DataFrame) -> float:
    """The trace's request rate: requests over its arrival window."""
    window = float(np.ptp(trace["arrival_s"].to_numpy(float)))
    return len(trace) / window if window > 0 else float("inf")


def parting_prefill(trace: pd.DataFrame, config: SimConfig) -> int:
    """Prefill instances for which the decode stage is the tighter one (``config``'s own when it already is;
    colocated clusters have none to add)."""
    if config.mode != "disaggregated":
        return config.n_prefill
    prefill_qps, decode_qps = stage_capacity(trace, config)
    if prefill_qps >= PREFILL_HEADROOM * decode_qps:
        return config.n_prefill
    per_instance = prefill_qps / config.n_prefill
    return min(MAX_PREFILL, max(config.n_prefill, math.ceil(PREFILL_HEADROOM * decode_qps / per_instance)))


def parting_loads(trace: pd.DataFrame, config: SimConfig) -> list[float]:
    """The loads to try (3 significant digits): :data:`PART_FACTORS` times the decode stage's estimated capacity
    above the trace's current rate, or 1.25, 1.5 and 2 times that rate when it is above them all."""
    decode_qps = stage_capacity(trace, config)[1]
    current = offered_qps(trace)
    loads = [float(f"{f * decode_qps:.3g}") for f in PART_FACTORS]
    above = [q for q in loads if q > ABOVE_CURRENT * current]
    return above or ([float(f"{f * current:.3g}") for f in (1.25, 1.5, 2.0)] if math.isfinite(current) else loads)


def parting_load(store: Store, trace: pd.DataFrame, spec: PredictorSpec, configs: list[SimConfig],
                 short_quantile: float = 0.5, seed: int = 0, on_progress: Progress = no_progress) -> Parting:
    """Search the lowest load (of :func:`parting_loads`) at which ``configs`` stop tying, with the prefill instances
    of :func:`parting_prefill` (the first config's); see the module docstring."""
    if len(configs) < 2:
        raise ValueError("the search compares at least two configurations")
    n_prefill = parting_prefill(trace, configs[0])
    shaped = [c.with_(n_prefill=n_prefill) if c.mode == "disaggregated" else c for c in configs]
    loads = parting_loads(trace, shaped[0])
    shape = (f" with {n_prefill} prefill instances (so that prefill is not the bottleneck)"
             if n_prefill != configs[0].n_prefill else "")
    tried: list[float] = []
    outcomes: list[Outcome] = []
    for k, qps in enumerate(loads):
        timed = poisson_retime(trace, qps, seed)
        outcomes = [run_simulation(store, timed, spec, c, short_quantile) for c in shaped]
        tried.append(qps)
        on_progress(k + 1, len(loads), "loads")
        if not headline_tie([o.summary for o in outcomes]):
            a, b = (f"{o.summary['short_e2e_p99_s']:.1f} s" for o in outcomes[:2])
            return Parting(qps, n_prefill, tried, outcomes, (
                f"Measured: the configurations part at {qps:g} QPS (Poisson re-timing){shape}, short-request P99 "
                f"{a} vs {b}; loads tried: {', '.join(f'{q:g}' for q in tried)} QPS."))
    reading = StageReading.from_summary(outcomes[0].summary)
    why = f": at {tried[-1]:g} QPS {tie_reason(reading)}" if reading else ""
    return Parting(None, n_prefill, tried, outcomes, (
        f"No load tried ({', '.join(f'{q:g}' for q in tried)} QPS{shape}) parted the configurations{why}."))
