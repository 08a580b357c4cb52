"""Scheduler simulator speed: simulated seconds per wall second and requests per second.

Requests are drawn (seeded, with replacement) from the shipped Azure 2023 conversation trace and
arrive as a Poisson process at the cluster's estimated capacity (``saturating_qps`` factor 1), with an
oracle+noise predictor, on two clusters: the default 1P+3D LB+SJF one, and 4 colocated LB+SJF instances
with chunked prefill and prefix caching (the Azure trace has no block hashes, so each prompt gets
:func:`shared_prefix_hashes`). The largest run of the second cluster is measured against the
:data:`TARGET_S` target (issue 17: 100,000 requests in under 5 s on 2 cores).
Run: ``python lenscope/benchmarks/bench_scheduler.py [--sizes 1914 100000]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from lenscope.analysis.scheduler import SimConfig, make_predictor, simulate
from lenscope.analysis.scheduler.traces import load_trace_file, poisson_retime
from lenscope.benchmarks.records import Number, Numbers
from lenscope.jobs.scheduler.replay import SHIPPED_TRACES, saturating_qps

TRACE = SHIPPED_TRACES / "AzureLLMInferenceTrace_conv.csv"
TARGET_S = 5.0
HASH_BLOCK_TOKENS = 512
CONFIGS = {"1P+3D": SimConfig(dispatch="lb", queue="sjf"),
           "4x colo chunked+prefix": SimConfig(mode="colocated", n_decode=4, dispatch="lb", queue="sjf",
                                               chunk_tokens=2048, prefix_cache_tokens=262_144,
                                               hash_block_tokens=HASH_BLOCK_TOKENS)}
KEYS = {"1P+3D": "disaggregated", "4x colo chunked+prefix": "colocated_chunked_prefix"}  # figure names


def shared_prefix_hashes(trace: pd.DataFrame, groups: int = 64, shared_blocks: int = 4, seed: int = 0) -> pd.DataFrame:
    """``hash_ids`` for a trace without them: each prompt starts with up to ``shared_blocks`` blocks shared by its
    group (one of ``groups``, Zipf-distributed like system prompts), the rest of its blocks its own."""
    group = np.random.default_rng(seed).zipf(1.5, size=len(trace)) % groups
    blocks = -(-trace["prompt_tokens"].to_numpy() // HASH_BLOCK_TOKENS)
    shared = np.minimum(blocks, shared_blocks)
    own = np.cumsum(blocks - shared) - (blocks - shared) + groups * shared_blocks  # first own block id per prompt
    hashes = [tuple(range(g * shared_blocks, g * shared_blocks + s)) + tuple(range(o, o + b - s))
              for g, s, o, b in zip(group.tolist(), shared.tolist(), own.tolist(), blocks.tolist())]
    return trace.assign(hash_ids=hashes)


def bench(n: int, trace_path: Path, config: SimConfig, seed: int = 0) -> dict:
    source = load_trace_file(trace_path)
    rows = np.random.default_rng(seed).integers(0, len(source), size=n)
    trace = source.iloc[rows].reset_index(drop=True)
    trace = poisson_retime(trace, saturating_qps(trace, config, factor=1.0), seed)
    if config.prefix_cache_tokens:
        trace = shared_prefix_hashes(trace, seed=seed)
    predictor = make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=50, seed=seed)
    start = time.perf_counter()
    result = simulate(trace, predictor, config)
    wall = time.perf_counter() - start
    return {"requests": n, "wall_s": wall, "sim_s": result.sim_s, "sim_s_per_wall_s": result.sim_s / wall,
            "requests_per_s": n / wall, "iterations_recorded": len(result.segments)}


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1914, 100_000])
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args(argv)
    print(f"{'cluster':>22} {'requests':>9} {'wall s':>8} {'sim s':>9} {'sim s/wall s':>13} {'req/s':>9} "
          f"{'segments':>9}")
    walls, numbers = {}, {}
    for name, config in CONFIGS.items():
        for n in args.sizes:
            r = bench(n, args.trace, config)
            walls[name, n] = r["wall_s"]
            key, of = f"{KEYS[name]}_{n}", f"{n:,} requests on {name}"
            numbers |= {f"{key}_wall_s": Number(r["wall_s"], "s", f"wall time to simulate {of}"),
                        f"{key}_sim_s_per_wall_s": Number(r["sim_s_per_wall_s"], "sim s / wall s",
                                                          f"simulated seconds per wall second, {of}"),
                        f"{key}_requests_per_s": Number(r["requests_per_s"], "requests/s",
                                                        f"requests simulated per wall second, {of}")}
            print(f"{name:>22} {r['requests']:>9,} {r['wall_s']:>8.2f} {r['sim_s']:>9.1f} "
                  f"{r['sim_s_per_wall_s']:>13.1f} {r['requests_per_s']:>9.0f} {r['iterations_recorded']:>9,}")
    n, wall = max(args.sizes), walls[list(CONFIGS)[-1], max(args.sizes)]
    print(f"{n:,} requests with chunked prefill + prefix caching: {wall:.2f} s wall = {wall / TARGET_S:.2f}x the "
          f"{TARGET_S:g} s target")
    return numbers | {"largest_vs_target": Number(wall / TARGET_S, "x", f"wall time of {n:,} requests with chunked "
                                                   f"prefill + prefix caching over the {TARGET_S:g} s target")}


if __name__ == "__main__":
    main()
