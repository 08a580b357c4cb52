"""Live serving against the simulator: the embedded model serves held-out study prompts under each policy at two
loads for real; the simulator, calibrated from a profile of the same engine, replays the same requests with the
same predictions. Each policy is served twice at each load (the runs interleaved), so that the simulator's P99 error
is read with a CI against the real server's own run-to-run spread; the tables give the errors per run, policy and
request class, and whether both rank the policies alike. Beside the prediction, two replays read the error apart from
the machine's drift: at each run's own speed, and at the machine's speed measured over time.

Run: ``python -m lenscope benchmark live-serving [--quick] [--repeats N]`` (about 9 minutes on 2 cores; ``--quick``:
about a minute).
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pandas as pd

from lenscope.analysis.core.metrics import Estimate
from lenscope.benchmarks.records import Number, Numbers
from lenscope.jobs.scheduler.live import (
    BEYOND,
    CANNOT_TELL,
    LOADS,
    P99_GOAL,
    REPLAYS,
    SIM_READINGS,
    WITHIN,
    LivePolicy,
    LiveRun,
    LiveSetup,
    difference_texts,
    live_session,
    p99_bias,
    p99_errors,
    policy_differences,
    ranking,
)
from lenscope.models.target import TargetModel, device_name

# Three policies served twice each at two loads, 14 requests a run, keep the benchmark under 10 minutes on 2 cores.
POLICIES = (LivePolicy("fcfs"), LivePolicy("sjf"), LivePolicy("srpt"))
REPEATS, REQUESTS = 2, 14
# The simulator's rankings set beside the real one: which replay ranks (LiveRun's attribute), its name and a note.
SIM_RANKINGS = {"ranked": ("sim: ", "; the simulator on the session's cost model for every policy"),
                "at_speed": ("sim at each run's speed:", ""),
                "over_time": ("sim at the machine's speed over time:", "")}
QUICK = LiveSetup(requests=8, calibration=6, max_output=24, max_prompt=128, batch=3, max_new_tokens=48)
QUICK_POLICIES = (LivePolicy("fcfs"), LivePolicy("sjf", "oracle"))


def percent(value: float) -> str:
    return f"{value:+.1%}" if np.isfinite(value) else "n/a"


def policy_rows(runs: list[LiveRun]) -> list[str]:
    """A markdown row per run: real and simulated mean, P99 and short-request P99 end-to-end latency, with the
    simulator's errors, the TTFT and TPOT P99 errors, the preemptions, the machine's speed measured before the run
    against the session's profile, how long the run's iterations took against the cost model at that speed, the share
    of CPU time the hypervisor took meanwhile, the P99 error at the run's own speed, and the P99 E2E and TTFT errors at
    the machine's measured speed over time."""
    lines = ["| policy | run | mean E2E real / sim (s) | err | P99 E2E real / sim (s) | err "
             "| short P99 E2E real / sim (s) | err | TTFT P99 err | TPOT P99 err | preemptions "
             "| speed before (prefill / decode) | iterations / that speed | CPU stolen "
             "| P99 E2E err at the run's speed | P99 E2E / TTFT err at the speed over time |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        s, p99, over_time = run.summary(), run.p99()["error"], run.p99("over_time")["error"]
        mean_err = (s["sim_mean_e2e_s"] - s["real_mean_e2e_s"]) / s["real_mean_e2e_s"]
        lines.append(f"| {s['policy']} | {s['repeat'] + 1} | {s['real_mean_e2e_s']:.2f} / {s['sim_mean_e2e_s']:.2f} "
                     f"| {percent(mean_err)} | {s['real_p99_e2e_s']:.2f} / {s['sim_p99_e2e_s']:.2f} "
                     f"| {percent(p99['e2e'])} | {s['real_short_p99_e2e_s']:.2f} / {s['sim_short_p99_e2e_s']:.2f} "
                     f"| {percent((s['sim_short_p99_e2e_s'] - s['real_short_p99_e2e_s']) / s['real_short_p99_e2e_s'])}"
                     f" | {percent(p99['ttft'])} | {percent(p99['tpot'])} | {s['preemptions']} "
                     f"| {s['speed_prefill']:.2f}x / {s['speed_decode']:.2f}x | {s['iteration_ratio']:.2f}x "
                     f"| {s['stolen']:.0%} "
                     f"| {percent(run.p99('at_speed')['error']['e2e'])} "
                     f"| {percent(over_time['e2e'])} / {percent(over_time['ttft'])} |")
    return lines


def goal_rows(errors: dict[str, pd.DataFrame]) -> list[str]:
    """A markdown row per load and policy: P99 E2E averaged over its runs, real and simulated, then in each replay of
    :data:`REPLAYS` (``errors``, from :func:`p99_errors`) the simulator's mean error with its CI and how it reads
    against the goal."""
    lines = ["| load | policy | runs | P99 E2E real / sim (s) | " + " | ".join(
        f"sim {REPLAYS[r]} [95% CI] | reading" for r in errors) + " |", "|---" * (4 + 2 * len(errors)) + "|"]
    frames = list(errors.values())
    for k, e in frames[0].iterrows():
        lines.append(f"| {e['load']} | {e['policy']} | {e['runs']} | {e['real_s']:.2f} / {e['sim_s']:.2f} | "
                     + " | ".join(f"{interval(f.loc[k])} | {f.loc[k, 'reading']}" for f in frames) + " |")
    return lines


def interval(row: pd.Series) -> str:
    """A relative error with its CI, in percent (without a CI where the runs give none)."""
    if not np.isfinite(row["lo"]):
        return percent(row["error"])
    return f"{percent(row['error'])} [{percent(row['lo'])}, {percent(row['hi'])}]"


def error_grid(runs: list[LiveRun]) -> pd.DataFrame:
    """The simulator's relative error per policy, class, latency and percentile, averaged over a policy's runs (one
    column per policy)."""
    frames = [r.errors().assign(policy=r.policy.label) for r in runs]
    grid = pd.concat(frames).pivot_table(index=["class", "metric", "percentile"], columns="policy", values="error",
                                         sort=False)
    return grid[list(dict.fromkeys(r.policy.label for r in runs))]


def pair_lines(differences: pd.DataFrame) -> list[str]:
    """A line per pair of policies: the real and simulated mean E2E difference (on one speed, at each run's speed and
    at the machine's speed over time) with 95% CIs."""
    lines = []
    for _, d in differences.iterrows():
        real, sim, at_speed, over_time = difference_texts(d, ("real", "sim", "at_speed", "over_time"))
        lines.append(f"- {d['A']} minus {d['B']}: real {real} s, sim {sim} s: {SIM_READINGS[d['sim_reading']]}; sim "
                     f"at each run's speed {at_speed} s, at the machine's speed over time {over_time} s")
    return lines


def bias_text(estimate: Estimate, reading: str) -> str:
    """The simulator's P99 error averaged over every run (:func:`p99_bias`), with its CI and reading."""
    return f"{percent(estimate.value)} [{percent(estimate.lo)}, {percent(estimate.hi)}] ({reading})"


def run_to_run(runs: list[LiveRun]) -> float:
    """How far apart a policy's real P99 E2E latencies are between two of its runs at the same load: |a - b| over
    their mean, averaged over every pair of its runs and then over loads and policies (NaN without repetitions; the
    same measure whatever the number of runs)."""
    by: dict[tuple, list[float]] = {}
    for run in runs:
        by.setdefault((run.load, run.policy.label), []).append(run.summary()["real_p99_e2e_s"])
    apart = [np.mean([abs(a - b) / ((a + b) / 2) for a, b in itertools.combinations(p99, 2)])
             for p99 in by.values() if len(p99) > 1]
    return float(np.mean(apart)) if apart else float("nan")


def figures(counts: dict[str, dict[str, int]], biases: dict[str, tuple[Estimate, str]], agree: dict[str, int],
            same_order: int, apart: int, spread: float, runs: int, minutes: float) -> Numbers:
    """The last line's figures: policy-loads per reading, the P99 error over all runs with its CI per replay, the
    rankings and pairs that agree, the real server's run-to-run spread."""
    readings = {WITHIN: "within", BEYOND: "beyond", CANNOT_TELL: "cannot_tell"}
    numbers = {f"{replay}_{key}": Number(counts[replay].get(reading, 0), "policy-loads",
                                         f"policy-loads whose P99 E2E error reads '{reading}' against the "
                                         f"{P99_GOAL:.0%} goal, sim {REPLAYS[replay]}")
               for replay in ("sim", "over_time") for reading, key in readings.items()}
    for replay, (estimate, reading) in biases.items():
        of = f"the simulator's P99 E2E error over all runs, sim {REPLAYS[replay]} ({reading})"
        numbers |= {f"{replay}_p99_error": Number(100 * estimate.value, "%", of),
                    f"{replay}_p99_error_lo": Number(100 * estimate.lo, "%", f"{of}: 95% CI, low"),
                    f"{replay}_p99_error_hi": Number(100 * estimate.hi, "%", f"{of}: 95% CI, high")}
    numbers |= {f"ranking_same_{which}": Number(agree[which], "loads", f"loads where the ranking by {name.strip(': ')} "
                                                                      "is the real one's")
                for which, (name, _) in SIM_RANKINGS.items()}
    return numbers | {
        "pairs_ordered_alike": Number(same_order, "pairs", "pairs of policies the real runs tell apart that the "
                                                           "simulator orders alike"),
        "pairs_told_apart": Number(apart, "pairs", "pairs of policies the real runs tell apart"),
        "real_run_to_run": Number(100 * spread, "%", "how far apart a policy's real P99 E2E is between two runs"),
        "real_runs": Number(runs, "runs", "real runs served"),
        "minutes": Number(minutes, "min", "wall time of the comparison")}


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a one-minute check: 8 short requests, batch 3, "
                                                              "FCFS and oracle SJF")
    parser.add_argument("--requests", type=int, default=REQUESTS, help="requests served per run")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="real runs per policy and load")
    parser.add_argument("--seed", type=int, default=LiveSetup.seed, help="draw of requests and arrivals")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    setup = QUICK if args.quick else LiveSetup(requests=args.requests, seed=args.seed)
    policies = QUICK_POLICIES if args.quick else POLICIES
    target = TargetModel.load(None)
    session = live_session(target, setup)
    calibration = session.calibration
    model = target.source.spec or "the embedded model"
    print(f"# Live serving vs the simulator: {model} on {device_name(target.device)}")
    print(f"each policy served {args.repeats} times at each load, the runs interleaved; each run's simulation (sim) "
          "uses the session's cost model at the machine's speed measured right before the run; error = (sim - real) "
          "/ real")
    print(f"{setup.requests} requests (study chat answers of at most {setup.max_output} tokens, prompts of at most "
          f"{setup.max_prompt}; mean answer {session.evaluation['output_tokens'].mean():.0f} tokens), one colocated "
          f"instance, continuous batching of at most {setup.batch} rows, out-of-fold predictions")
    print(f"cost model fitted to {len(session.iterations)} iterations of {len(session.calibration_runs)} other study "
          f"prompts at every batch size from 1 to {setup.batch}: prefill MAPE {calibration.prefill_mape:.1%}, "
          f"decode MAPE {calibration.decode_mape:.1%}; estimated capacity {session.capacity:.2f} requests/s")
    agree, apart, same_order, served = dict.fromkeys(SIM_RANKINGS, 0), 0, 0, []
    for load, fraction in LOADS.items():
        runs = session.serve(policies, load, args.repeats)
        served += runs
        real = ranking(runs, "real")
        differences = policy_differences(runs)
        apart += int(differences["real_tells_apart"].sum())
        same_order += int((differences["sim_reading"] == "same order").sum())
        print(f"\n## {load} load: {fraction:g} x capacity = {session.qps(load):.2f} requests/s")
        print("\n".join(policy_rows(runs)))
        print(f"ranking by mean E2E over the runs, real: {' < '.join(real)}")
        for which, (name, note) in SIM_RANKINGS.items():
            order = ranking(runs, which)
            agree[which] += order == real
            print(f"ranking by mean E2E, {name} {' < '.join(order)} ({'the same' if order == real else 'DIFFERENT'}"
                  f"{note})")
        over = ("95% CI over the runs, from their run-to-run spread pooled over the policies"
                if (differences["real_ci_over"] == "runs").all() else "95% paired bootstrap CI over requests")
        print(f"\ndifferences of mean E2E over the same {setup.requests} requests (real and sim at each run's speed: "
              f"{over}; sim: 95% paired bootstrap CI over requests, on the session's cost model):")
        print("\n".join(pair_lines(differences)))
        print("\nsimulator error per class, mean over runs (P50/P90/P99 of TTFT, TPOT, E2E):")
        print(error_grid(runs).map(percent).to_string())
        lengths = np.mean([r.summary()["same_answer_length"] for r in runs])
        print(f"answers as long as the study's: {lengths:.0%} of requests")
        ttft = {replay: np.mean([r.p99(replay)["error"]["ttft"] for r in runs]) for replay in REPLAYS}
        print("TTFT P99 error, mean over the runs: " + ", ".join(f"sim {REPLAYS[r]} {percent(e)}"
                                                              for r, e in ttft.items()))
    errors = {replay: p99_errors(served, replay) for replay in REPLAYS}
    spread = run_to_run(served)
    print(f"\n## P99 E2E against the goal ({P99_GOAL:.0%}): mean over each policy's runs, 95% CI from the run-to-run "
          "spread of the errors pooled over loads and policies")
    print("\n".join(goal_rows(errors)))
    biases = {replay: p99_bias(served, replay) for replay in REPLAYS}
    overall = {replay: bias_text(*bias) for replay, bias in biases.items()}
    print(f"\nthe simulator's P99 E2E error averaged over all {len(served)} runs (95% bootstrap CI over loads and "
          "policies): " + "; ".join(f"{REPLAYS[r]} {text}" for r, text in overall.items()))
    print(f"the real server against itself: a policy's P99 E2E {spread:.1%} apart between two of its runs at the same "
          "load (mean over pairs of runs, loads and policies)")
    counts, over_time = errors["sim"]["reading"].value_counts(), errors["over_time"]["reading"].value_counts()
    minutes = (time.perf_counter() - started) / 60
    print(f"\nlive serving: P99 E2E error within {P99_GOAL:.0%} for {counts.get(WITHIN, 0)} of {len(errors['sim'])} "
          f"policy-loads, beyond for {counts.get(BEYOND, 0)}, cannot tell for {counts.get(CANNOT_TELL, 0)} (at the "
          f"machine's speed over time: {over_time.get(WITHIN, 0)}, {over_time.get(BEYOND, 0)}, "
          f"{over_time.get(CANNOT_TELL, 0)}); over all runs {overall['sim']}, at each run's measured speed "
          f"{overall['at_speed']}, at the machine's speed over time {overall['over_time']}; policy ranking the same at "
          f"{agree['ranked']} of {len(LOADS)} loads ({agree['at_speed']} at each run's speed, {agree['over_time']} at "
          f"the speed over time), pairs the real runs tell apart ordered alike {same_order} of {apart}, real P99 "
          f"{spread:.1%} apart run to run, {len(served)} real runs in {minutes:.1f} min")
    return figures({"sim": counts, "over_time": over_time}, biases, agree, same_order, apart, spread, len(served),
                   minutes)


if __name__ == "__main__":
    main()
