"""Scheduler simulator speed: simulated seconds per wall second and requests per second.

Requests are drawn (seeded, with replacement) from the shipped Azure 2023 conversation trace and
arrive as a Poisson process at the cluster's estimated capacity (``saturating_qps`` factor 1), on
the default 1P+3D LB+SJF configuration with an oracle+noise predictor.
Run: ``python benchmarks/bench_scheduler.py [--sizes 1914 100000]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from analysis.serving import SimConfig, make_predictor, simulate
from analysis.serving.traces import load_trace_file, poisson_retime
from lenscope.jobs.serving import SHIPPED_TRACES, saturating_qps

TRACE = SHIPPED_TRACES / "AzureLLMInferenceTrace_conv.csv"


def bench(n: int, trace_path: Path, config: SimConfig, seed: int = 0) -> dict:
    source = load_trace_file(trace_path)
    rows = np.random.default_rng(seed).integers(0, len(source), size=n)
    trace = source.iloc[rows].reset_index(drop=True)
    trace = poisson_retime(trace, saturating_qps(trace, config, factor=1.0), seed)
    predictor = make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=50, seed=seed)
    start = time.perf_counter()
    result = simulate(trace, predictor, config)
    wall = time.perf_counter() - start
    return {"requests": n, "wall_s": wall, "sim_s": result.sim_s, "sim_s_per_wall_s": result.sim_s / wall,
            "requests_per_s": n / wall, "iterations_recorded": len(result.segments)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1914, 100_000])
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args(argv)
    config = SimConfig(dispatch="lb", queue="sjf")
    print(f"{'requests':>9} {'wall s':>8} {'sim s':>9} {'sim s/wall s':>13} {'req/s':>9} {'segments':>9}")
    for n in args.sizes:
        r = bench(n, args.trace, config)
        print(f"{r['requests']:>9,} {r['wall_s']:>8.2f} {r['sim_s']:>9.1f} {r['sim_s_per_wall_s']:>13.1f} "
              f"{r['requests_per_s']:>9.0f} {r['iterations_recorded']:>9,}")


if __name__ == "__main__":
    main()
