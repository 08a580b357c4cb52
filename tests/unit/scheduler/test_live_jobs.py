"""Reading live runs without the model: a policy's repetitions are averaged, the simulator's P99 error gets a CI from
the run-to-run spread pooled over policies and loads and a reading against the 10% goal, and rankings and paired
differences group a policy's runs."""

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.scheduler.cost_model import CostModel, LinearCost
from lenscope.analysis.scheduler.engine import SimConfig, simulate
from lenscope.analysis.scheduler.predictors import ConstantPredictor, OraclePredictor
from lenscope.jobs.scheduler.live import (
    BEYOND,
    CANNOT_TELL,
    ONE_RUN,
    WITHIN,
    LivePolicy,
    LiveRun,
    goal_verdict,
    p99_bias,
    p99_errors,
    policy_differences,
    ranking,
)

COST = CostModel(prefill=LinearCost(a=0.02, b=2e-4, c=0.0, d=0.0), decode=LinearCost(a=0.05, b=0.0, c=0.01, d=0.0))


def _trace() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.3, 16)), "prompt_tokens": rng.integers(20, 200, 16),
                         "output_tokens": rng.integers(5, 60, 16)})


def _run(policy: LivePolicy, real_speed: float, repeat: int, load: str = "heavy") -> LiveRun:
    """A "real" run that is the simulator on a machine ``real_speed`` times slower than the cost model says."""
    trace = _trace()
    predictor = (OraclePredictor(trace["output_tokens"]) if policy.predictor == "oracle" else ConstantPredictor(1.0))
    config = SimConfig(mode="colocated", n_prefill=0, n_decode=1, max_batch_size=3, queue=policy.queue,
                       kv_capacity_tokens=1 << 20, cost=COST)
    real = simulate(trace, predictor, config.with_(cost=COST.scaled(real_speed)))
    sim = simulate(trace, predictor, config)
    return LiveRun(load, 3.0, policy, real, sim, sim, sim, sim, trace["output_tokens"].to_numpy(), repeat=repeat)


def test_the_p99_error_is_averaged_over_repetitions_with_a_pooled_ci():
    fcfs, sjf = LivePolicy("fcfs"), LivePolicy("sjf", "oracle")
    runs = [_run(fcfs, 1.02, 0), _run(sjf, 1.0, 0), _run(sjf, 1.04, 1), _run(fcfs, 1.0, 1)]
    errors = p99_errors(runs).set_index("policy")
    assert errors["runs"].tolist() == [2, 2]
    one = [r.p99().loc["e2e", "error"] for r in runs if r.policy == fcfs]
    assert errors.loc["FCFS", "error"] == pytest.approx(np.mean(one))  # the mean of the runs' errors
    assert errors.loc["FCFS", "lo"] < errors.loc["FCFS", "error"] < errors.loc["FCFS", "hi"]
    assert (errors["reading"] == WITHIN).all()  # a few percent off, repeated closely: inside +-10%
    slow = p99_errors([_run(fcfs, 1.5, 0), _run(fcfs, 1.45, 1)]).iloc[0]
    assert slow["error"] < -0.3 and slow["reading"] == BEYOND  # a machine a third slower is caught
    assert p99_errors(runs[:2])["reading"].tolist() == [ONE_RUN, ONE_RUN]  # no repetition, no CI
    bias, reading = p99_bias(runs)
    assert bias.value == pytest.approx(np.mean([r.p99().loc["e2e", "error"] for r in runs])) and reading == WITHIN
    assert p99_bias([_run(fcfs, 1.5, 0), _run(sjf, 1.45, 0)])[1] == BEYOND
    assert p99_errors(runs, "over_time")["error"].tolist() == pytest.approx(errors["error"].tolist())  # same replay
    with pytest.raises(ValueError, match="replay must be one of"):
        runs[0].p99("at speed")


def test_goal_readings():
    assert goal_verdict(-0.05, 0.08) == WITHIN
    assert goal_verdict(-0.15, 0.02) == CANNOT_TELL
    assert goal_verdict(0.11, 0.4) == BEYOND and goal_verdict(-0.4, -0.12) == BEYOND
    assert goal_verdict(float("nan"), float("nan")) == ONE_RUN


def test_rankings_and_differences_group_a_policy_s_runs():
    fcfs, sjf = LivePolicy("fcfs"), LivePolicy("sjf", "oracle")
    runs = [_run(fcfs, 1.0, 0), _run(sjf, 1.0, 0), _run(sjf, 1.0, 1), _run(fcfs, 1.0, 1)]
    assert ranking(runs, "real") == ranking(runs, "ranked") == ["SJF on oracle", "FCFS"]
    differences = policy_differences(runs)
    assert len(differences) == 1 and differences.iloc[0]["A"] == "FCFS" and differences.iloc[0]["requests"] == 16
    assert differences.iloc[0]["real_diff_s"] == pytest.approx(differences.iloc[0]["sim_diff_s"])
    assert differences.iloc[0]["real_ci_over"] == "runs"  # repetitions: the real CI is over runs
    same = LivePolicy("sjf", "constant")  # SJF on no information: FCFS's order, under another name
    drift = [_run(fcfs, 1.0, 0), _run(same, 1.3, 0), _run(same, 1.0, 1), _run(fcfs, 1.3, 1)]
    apart = policy_differences(drift).iloc[0]
    assert not apart["real_tells_apart"]  # a drift of 30% between runs is not read as a difference of policies
    assert apart["at_speed_diff_s"] == apart["over_time_diff_s"] == pytest.approx(0.0)
    assert apart["sim_diff_s"] == pytest.approx(0.0)
    single = policy_differences(drift[:2]).iloc[0]  # one run each: over requests, the drift looks like a difference
    assert single["real_ci_over"] == "requests" and single["real_tells_apart"]
