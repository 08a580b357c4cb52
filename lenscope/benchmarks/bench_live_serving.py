"""Live serving against the simulator: the embedded model serves held-out study prompts under each policy at two
loads for real; the simulator, calibrated from a profile of the same engine, replays the same requests with the
same predictions; the table gives the simulator's errors per policy and request class, and whether both rank the
policies alike.

Run: ``python -m lenscope benchmark live-serving [--quick]`` (about 8 minutes on 2 cores; ``--quick``: about a minute).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from lenscope.jobs.scheduler.live import (
    DEFAULT_POLICIES,
    LOADS,
    LivePolicy,
    LiveRun,
    LiveSetup,
    capacity_qps,
    draw_requests,
    engine_for,
    profile_engine,
    ranking,
    run_live,
)
from lenscope.models.target import TargetModel, device_name

GOAL = 0.10  # the target: simulated P99 within 10% of the real one
QUICK = LiveSetup(requests=8, calibration=6, max_output=24, max_prompt=128, batch=3, max_new_tokens=48)
QUICK_POLICIES = (LivePolicy("fcfs"), LivePolicy("sjf", "oracle"))


def percent(value: float) -> str:
    return f"{value:+.1%}" if np.isfinite(value) else "n/a"


def policy_rows(runs: list[LiveRun]) -> list[str]:
    """A markdown row per policy: real and simulated mean, P99 and short-request P99 end-to-end latency, with the
    simulator's errors, the TTFT and TPOT P99 errors and the preemptions."""
    lines = ["| policy | mean E2E real / sim (s) | err | P99 E2E real / sim (s) | err | short P99 E2E real / sim (s) "
             "| err | TTFT P99 err | TPOT P99 err | preemptions |", "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s, e = run.summary(), run.errors()
        p99 = e[(e["percentile"] == "P99") & (e["class"] == "all")].set_index("metric")["error"]
        mean_err = (s["sim_mean_e2e_s"] - s["real_mean_e2e_s"]) / s["real_mean_e2e_s"]
        lines.append(f"| {s['policy']} | {s['real_mean_e2e_s']:.2f} / {s['sim_mean_e2e_s']:.2f} | {percent(mean_err)} "
                     f"| {s['real_p99_e2e_s']:.2f} / {s['sim_p99_e2e_s']:.2f} | {percent(p99['e2e'])} "
                     f"| {s['real_short_p99_e2e_s']:.2f} / {s['sim_short_p99_e2e_s']:.2f} "
                     f"| {percent((s['sim_short_p99_e2e_s'] - s['real_short_p99_e2e_s']) / s['real_short_p99_e2e_s'])}"
                     f" | {percent(p99['ttft'])} | {percent(p99['tpot'])} | {s['preemptions']} |")
    return lines


def error_grid(runs: list[LiveRun]) -> pd.DataFrame:
    """The simulator's relative error per policy, class, latency and percentile (one column per policy)."""
    frames = [r.errors().assign(policy=r.policy.label) for r in runs]
    grid = pd.concat(frames).pivot_table(index=["class", "metric", "percentile"], columns="policy", values="error",
                                         sort=False)
    return grid[[r.policy.label for r in runs]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a one-minute check: 8 short requests, batch 3, "
                                                              "FCFS and oracle SJF")
    parser.add_argument("--requests", type=int, default=LiveSetup.requests, help="requests served per run")
    parser.add_argument("--seed", type=int, default=LiveSetup.seed, help="draw of requests and arrivals")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    setup = QUICK if args.quick else LiveSetup(requests=args.requests, seed=args.seed)
    policies = QUICK_POLICIES if args.quick else DEFAULT_POLICIES
    evaluation, calibration_runs = draw_requests(setup)
    target = TargetModel.load(None)
    engine = engine_for(target, setup)
    calibration, profile = profile_engine(engine, calibration_runs, setup)
    capacity = capacity_qps(evaluation, setup, calibration)
    model = target.source.spec or "the embedded model"
    print(f"# Live serving vs the simulator: {model} on {device_name(target.device)}")
    print(f"{setup.requests} requests (study chat answers of at most {setup.max_output} tokens, prompts of at most "
          f"{setup.max_prompt}; mean answer {evaluation['output_tokens'].mean():.0f} tokens), one colocated instance, "
          f"continuous batching of at most {setup.batch} rows, out-of-fold predictions")
    print(f"cost model fitted to {len(profile.segments)} iterations of {len(calibration_runs)} other study prompts "
          f"served at once: prefill MAPE {calibration.prefill_mape:.1%}, decode MAPE {calibration.decode_mape:.1%}; "
          f"estimated capacity {capacity:.2f} requests/s")
    worst, agree, served = 0.0, 0, 0
    for load, fraction in LOADS.items():
        qps = fraction * capacity
        runs = []
        for policy in policies:
            runs.append(run_live(engine, evaluation, setup, calibration, policy, load, qps))
            served += 1
        real, sim = ranking(runs, "real"), ranking(runs, "sim")
        same = real == sim
        agree += same
        worst = max(worst, *(abs(r.errors().query("metric == 'e2e' and percentile == 'P99'")["error"]).max()
                             for r in runs))
        print(f"\n## {load} load: {fraction:g} x capacity = {qps:.2f} requests/s")
        print("\n".join(policy_rows(runs)))
        print(f"ranking by mean E2E, real: {' < '.join(real)}")
        print(f"ranking by mean E2E, sim:  {' < '.join(sim)} ({'the same' if same else 'DIFFERENT'})")
        print("\nsimulator error per class (P50/P90/P99 of TTFT, TPOT, E2E):")
        print(error_grid(runs).map(percent).to_string())
        lengths = np.mean([r.summary()["same_answer_length"] for r in runs])
        print(f"answers as long as the study's: {lengths:.0%} of requests")
    minutes = (time.perf_counter() - started) / 60
    print(f"\nlive serving: worst P99 E2E error {worst:.1%} (goal {GOAL:.0%}), policy ranking the same at {agree} of "
          f"{len(LOADS)} loads, {served} real runs in {minutes:.1f} min")


if __name__ == "__main__":
    main()
