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
    SIM_READINGS,
    LivePolicy,
    LiveRun,
    LiveSetup,
    difference_texts,
    live_session,
    policy_differences,
    ranking,
)
from lenscope.models.target import TargetModel, device_name

GOAL = 0.10  # the target: simulated P99 within 10% of the real one
QUICK = LiveSetup(requests=8, calibration=6, max_output=24, max_prompt=128, batch=3, max_new_tokens=48)
QUICK_POLICIES = (LivePolicy("fcfs"), LivePolicy("sjf", "oracle"))


def percent(value: float) -> str:
    return f"{value:+.1%}" if np.isfinite(value) else "n/a"


def policy_rows(runs: list[LiveRun]) -> list[str]:
    """A markdown row per policy: real and simulated mean, P99 and short-request P99 end-to-end latency, with the
    simulator's errors, the TTFT and TPOT P99 errors, the preemptions, how long the run's iterations took against the
    profile's cost model for the same iterations and the share of CPU time the hypervisor took meanwhile."""
    lines = ["| policy | mean E2E real / sim (s) | err | P99 E2E real / sim (s) | err | short P99 E2E real / sim (s) "
             "| err | TTFT P99 err | TPOT P99 err | preemptions | iterations / profile | CPU stolen "
             "| P99 E2E err at the run's speed |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s, p99 = run.summary(), run.p99()["error"]
        mean_err = (s["sim_mean_e2e_s"] - s["real_mean_e2e_s"]) / s["real_mean_e2e_s"]
        lines.append(f"| {s['policy']} | {s['real_mean_e2e_s']:.2f} / {s['sim_mean_e2e_s']:.2f} | {percent(mean_err)} "
                     f"| {s['real_p99_e2e_s']:.2f} / {s['sim_p99_e2e_s']:.2f} | {percent(p99['e2e'])} "
                     f"| {s['real_short_p99_e2e_s']:.2f} / {s['sim_short_p99_e2e_s']:.2f} "
                     f"| {percent((s['sim_short_p99_e2e_s'] - s['real_short_p99_e2e_s']) / s['real_short_p99_e2e_s'])}"
                     f" | {percent(p99['ttft'])} | {percent(p99['tpot'])} | {s['preemptions']} "
                     f"| {s['iteration_ratio']:.2f}x | {s['stolen']:.0%} "
                     f"| {percent((s['at_speed_p99_e2e_s'] - s['real_p99_e2e_s']) / s['real_p99_e2e_s'])} |")
    return lines


def worst_p99_error(runs: list[LiveRun], at_speed: bool = False) -> float:
    """The largest relative error of the simulated P99 end-to-end latency (all requests) over ``runs``."""
    return max(abs(r.errors(at_speed).query("metric == 'e2e' and percentile == 'P99'")["error"]).max() for r in runs)


def error_grid(runs: list[LiveRun]) -> pd.DataFrame:
    """The simulator's relative error per policy, class, latency and percentile (one column per policy)."""
    frames = [r.errors().assign(policy=r.policy.label) for r in runs]
    grid = pd.concat(frames).pivot_table(index=["class", "metric", "percentile"], columns="policy", values="error",
                                         sort=False)
    return grid[[r.policy.label for r in runs]]


def pair_lines(differences: pd.DataFrame) -> list[str]:
    """A line per pair of policies: the real and simulated mean E2E difference with paired 95% CIs."""
    lines = []
    for _, d in differences.iterrows():
        real, sim = difference_texts(d)
        lines.append(f"- {d['A']} minus {d['B']}: real {real} s, sim {sim} s: {SIM_READINGS[d['sim_reading']]}")
    return lines


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
    target = TargetModel.load(None)
    session = live_session(target, setup)
    calibration = session.calibration
    model = target.source.spec or "the embedded model"
    print(f"# Live serving vs the simulator: {model} on {device_name(target.device)}")
    print("each run's simulation (sim) is calibrated on a profile taken right before it; error = (sim - real) / real")
    print(f"{setup.requests} requests (study chat answers of at most {setup.max_output} tokens, prompts of at most "
          f"{setup.max_prompt}; mean answer {session.evaluation['output_tokens'].mean():.0f} tokens), one colocated "
          f"instance, continuous batching of at most {setup.batch} rows, out-of-fold predictions")
    print(f"cost model fitted to {len(session.iterations)} iterations of {len(session.calibration_runs)} other study "
          f"prompts at every batch size from 1 to {setup.batch}: prefill MAPE {calibration.prefill_mape:.1%}, "
          f"decode MAPE {calibration.decode_mape:.1%}; estimated capacity {session.capacity:.2f} requests/s")
    worst, worst_at_speed, agree, apart, same_order, served, repeat = 0.0, 0.0, 0, 0, 0, 0, float("nan")
    for load, fraction in LOADS.items():
        runs = session.serve(policies, load)
        served += len(runs)
        real, sim = ranking(runs, "real"), ranking(runs, "ranked")
        same = real == sim
        agree += same
        differences = policy_differences(runs)
        apart += int(differences["real_tells_apart"].sum())
        same_order += int((differences["sim_reading"] == "same order").sum())
        worst = max(worst, worst_p99_error(runs))
        worst_at_speed = max(worst_at_speed, worst_p99_error(runs, at_speed=True))
        print(f"\n## {load} load: {fraction:g} x capacity = {session.qps(load):.2f} requests/s")
        print("\n".join(policy_rows(runs)))
        print(f"ranking by mean E2E, real: {' < '.join(real)}")
        print(f"ranking by mean E2E, sim:  {' < '.join(sim)} ({'the same' if same else 'DIFFERENT'}; the simulator on "
              "the first profile's cost model for every policy)")
        print(f"\npaired differences of mean E2E over the same {setup.requests} requests (95% bootstrap CI; the "
              "simulator on the first profile's cost model):")
        print("\n".join(pair_lines(differences)))
        print("\nsimulator error per class (P50/P90/P99 of TTFT, TPOT, E2E):")
        print(error_grid(runs).map(percent).to_string())
        lengths = np.mean([r.summary()["same_answer_length"] for r in runs])
        print(f"answers as long as the study's: {lengths:.0%} of requests")
        if load == "heavy":
            again = session.serve(policies[:1], load)[0]
            served += 1
            first, second = runs[0].summary(), again.summary()
            repeat = abs(second["real_p99_e2e_s"] - first["real_p99_e2e_s"]) / first["real_p99_e2e_s"]
            itself = policy_differences([runs[0], again]).iloc[0]
            gap = difference_texts(itself)[0]
            print(f"\nthe real server against itself ({runs[0].policy.label} served again): P99 E2E "
                  f"{first['real_p99_e2e_s']:.2f} s then {second['real_p99_e2e_s']:.2f} s ({repeat:.1%} apart); mean "
                  f"E2E first minus second {gap} s over the same requests; iterations / profile "
                  f"{first['iteration_ratio']:.2f}x then {second['iteration_ratio']:.2f}x")
    minutes = (time.perf_counter() - started) / 60
    print(f"\nlive serving: worst P99 E2E error {worst:.1%} (goal {GOAL:.0%}; {worst_at_speed:.1%} at each run's "
          f"measured speed), policy ranking the same at {agree} of "
          f"{len(LOADS)} loads, pairs the real runs tell apart ordered alike {same_order} of {apart}, real P99 "
          f"{repeat:.1%} apart run to run, {served} real runs in {minutes:.1f} min")


if __name__ == "__main__":
    main()
