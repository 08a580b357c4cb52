"""The live server on the embedded model: on the cost model's clock it reproduces the simulator request by request
(FCFS, SJF, preemptive SRPT), a recomputed (evicted) request keeps its answer, and bad configs are refused."""

import json

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, CostModel, LinearCost, fit_iterations, fit_speed
from lenscope.analysis.scheduler.engine import SimConfig, simulate
from lenscope.analysis.scheduler.live_server import (
    CostClock,
    LiveRequest,
    MeasuredSpeed,
    ReplayEngine,
    check_live_config,
    iteration_ratio,
    profile_iterations,
    replay,
    serve,
    speed_over_time,
)
from lenscope.analysis.scheduler.predictors import TraceColumnPredictor
from lenscope.models.engine import BatchedEngine, GenerationSettings

PROMPTS = ["Name three colours.", "Write a haiku about the sea.", "What is 2 + 2?", "Say hi.",
           "List the planets of the solar system.", "Why is the sky blue?", "Count to five.", "Name a fruit."]


def _config(queue: str, preemptive: bool = False, batch: int = 3) -> SimConfig:
    return SimConfig(mode="colocated", n_prefill=0, n_decode=1, max_batch_size=batch, queue=queue,
                     preemptive=preemptive, kv_capacity_tokens=1 << 20, max_prefill_tokens=256)


def _requests(target, caps):
    rng = np.random.default_rng(3)
    arrivals = np.concatenate([[0.0], np.cumsum(rng.exponential(0.004, len(caps) - 1))])
    return [LiveRequest(tuple(target.chat_ids(p)), float(a), GenerationSettings(max_new_tokens=int(c), seed=k))
            for k, (p, a, c) in enumerate(zip(PROMPTS, arrivals, caps))]


@pytest.mark.parametrize("queue,preemptive", [("fcfs", False), ("sjf", False), ("srpt", True)])
def test_on_the_cost_clock_the_live_server_is_the_simulator(target, queue, preemptive):
    requests = _requests(target, [9, 4, 12, 3, 10, 5, 8, 2])
    predictor = TraceColumnPredictor(np.array([30.0, 2, 25, 4, 1, 20, 3, 6]))
    config = _config(queue, preemptive)
    live = serve(BatchedEngine(target, batch_size=3, features="none"), requests, predictor, config,
                 clock=CostClock(config.cost))
    trace = live.requests[["arrival_s", "prompt_tokens", "output_tokens"]]
    sim = simulate(trace, predictor, config)
    for column in ("first_token_s", "finish_s", "preemptions"):
        np.testing.assert_allclose(live.requests[column], sim.requests[column], rtol=0, atol=1e-9)
    assert iteration_ratio(live) == pytest.approx(1.0)  # every iteration took what the cost model says
    if preemptive:
        assert live.requests["preemptions"].sum() > 0  # the case the test is for did happen
    order = live.requests.sort_values("first_token_s")["rid"].tolist()
    if queue == "sjf":  # after the first, the queue is served in predicted order whenever it holds several
        assert order != sorted(order)


def test_the_profile_times_every_batch_size_on_short_and_long_prompts(target):
    requests = _requests(target, [12] * len(PROMPTS))
    iterations = profile_iterations(BatchedEngine(target, batch_size=3, features="none"), requests, 3, steps=3)
    decode, prefill = (iterations[iterations["kind"] == kind] for kind in ("decode", "prefill"))
    assert set(decode["batch_size"]) == {1, 2, 3} and (decode["end_s"] > decode["start_s"]).all()
    assert prefill["batch_size"].tolist() == [1, 2, 1, 1, 1] * 2  # odd sizes one per prefill, even sizes at once
    short, long = prefill["tokens"].iloc[:5].sum(), prefill["tokens"].iloc[5:].sum()
    assert long > short  # the second pass serves the longest prompts
    assert decode.groupby("batch_size").size().max() <= 2 * 3  # a new batch's first step is not timed
    assert fit_iterations(iterations).cost.decode.sizes  # enough to fit a cost model
    twice = profile_iterations(BatchedEngine(target, batch_size=3, features="none"), requests, 3, steps=2,
                               passes=("shortest",), rounds=2)  # the second round in reverse order: sizes 3, 2, 1
    twice_prefill = twice[twice["kind"] == "prefill"]
    assert twice_prefill["batch_size"].tolist() == [1, 2, 1, 1, 1] + [1, 1, 1, 2, 1]
    assert twice_prefill["tokens"].iloc[:5].tolist() == prefill["tokens"].iloc[:5].tolist()  # the shortest prompts
    with pytest.raises(ValueError, match="passes are some of"):
        profile_iterations(BatchedEngine(target, batch_size=3, features="none"), requests, 3, passes=("middle",))


def test_an_evicted_request_recomputes_and_keeps_its_answer(target):
    engine = BatchedEngine(target, batch_size=2, features="none")
    ids = target.chat_ids(PROMPTS[0])
    plain = engine.new_row(0, ids, GenerationSettings(max_new_tokens=12, seed=4))
    batch = engine.running_batch(2)
    engine.admit(batch, [plain])
    while batch.rows:
        engine.decode_step(batch)
    evicted = engine.new_row(0, ids, GenerationSettings(max_new_tokens=12, seed=4))
    batch = engine.running_batch(2)
    engine.admit(batch, [evicted])
    for _ in range(4):
        engine.decode_step(batch)
    engine.evict(batch, [evicted])
    assert not batch.rows and len(evicted.output_ids) == 5
    engine.admit(batch, [evicted])  # prompt and 5 tokens recomputed, the 6th sampled
    while batch.rows:
        engine.decode_step(batch)
    assert evicted.output_ids == plain.output_ids


def test_the_cost_model_fitted_to_iterations_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    rows = []
    for kind in ("prefill", "decode"):
        for _ in range(40):
            size = int(rng.integers(1, 9))
            tokens = int(rng.integers(20, 400)) if kind == "prefill" else size
            context = 0 if kind == "prefill" else int(rng.integers(50, 3000))
            seconds = (0.01 + 2e-4 * tokens + 1e-3 * size) if kind == "prefill" else (0.03 + 4e-3 * size
                                                                                       + 1e-6 * context)
            rows.append({"kind": kind, "start_s": 0.0, "end_s": seconds, "batch_size": size, "tokens": tokens,
                         "kv_tokens": context})
    fit = fit_iterations(pd.DataFrame(rows))
    assert fit.cost.prefill.a == pytest.approx(0.01) and fit.cost.prefill.b == pytest.approx(2e-4)
    assert fit.cost.decode.c == pytest.approx(4e-3) and fit.cost.decode.d == pytest.approx(1e-6)
    assert fit.prefill_mape < 1e-6 and fit.decode_mape < 1e-6
    with pytest.raises(ValueError, match="at least 3 decode"):
        fit_iterations(pd.DataFrame(rows[:40]))


def test_the_fitted_decode_cost_keeps_a_jump_between_batch_sizes_and_round_trips():
    """CPU kernels change between 3 and 4 rows: a fixed cost per measured batch size follows the jump that a line
    through the sizes misses; a size never measured is interpolated, one past the largest extrapolated."""
    jump = {1: 0.05, 2: 0.052, 4: 0.09, 5: 0.095}
    rows = [{"kind": "prefill", "start_s": 0.0, "end_s": 0.1 + 1e-3 * t, "batch_size": 1, "tokens": t,
             "kv_tokens": t} for t in (30, 60, 90, 200)]
    rows += [{"kind": "decode", "start_s": 0.0, "end_s": jump[size] + 2e-6 * context, "batch_size": size,
              "tokens": size, "kv_tokens": context} for size in jump for context in (100 * size, 300 * size)]
    decode = fit_iterations(pd.DataFrame(rows)).cost.decode
    assert decode.sizes == pytest.approx((0.05, 0.052, 0.071, 0.09, 0.095))
    assert decode.step_s(4, 4, 1000) == pytest.approx(0.092)
    assert decode.step_s(6, 6, 0) == pytest.approx(decode.a + 6 * decode.c)
    cost = fit_iterations(pd.DataFrame(rows)).cost
    assert CostModel.from_dict(json.loads(json.dumps(cost.to_dict()))) == cost
    assert "sizes" not in DEFAULT_COST.to_dict()["decode"]  # the stored configs' layout is unchanged


def test_a_short_profile_places_the_cost_model_at_the_machine_s_speed():
    """Prefill 1.3x and decode 0.8x as long as the model says: each phase's factor is recovered and the scaled model
    fits the iterations exactly."""
    cost = fit_iterations(pd.DataFrame(_profile_rows())).cost
    slower = cost.scaled(1.3, decode=0.8)
    rows = pd.DataFrame(_profile_rows())
    rows["end_s"] = [slower.iteration_s(k, t, s, c) for k, t, s, c in zip(rows["kind"], rows["tokens"],
                                                                         rows["batch_size"], rows["kv_tokens"])]
    calibration, factors = fit_speed(cost, rows)
    assert factors == pytest.approx({"prefill": 1.3, "decode": 0.8})
    assert calibration.cost.decode.sizes == pytest.approx(tuple(0.8 * x for x in cost.decode.sizes))
    assert calibration.prefill_mape < 1e-9 and calibration.decode_mape < 1e-9
    with pytest.raises(ValueError, match="needs prefill iterations"):
        fit_speed(cost, rows[rows["kind"] == "decode"])


def _profile_rows() -> list[dict]:
    jump = {1: 0.05, 2: 0.052, 4: 0.09}
    rows = [{"kind": "prefill", "start_s": 0.0, "end_s": 0.1 + 1e-3 * t, "batch_size": 1, "tokens": t,
             "kv_tokens": t} for t in (30, 60, 90, 200)]
    return rows + [{"kind": "decode", "start_s": 0.0, "end_s": jump[size] + 2e-6 * context, "batch_size": size,
                    "tokens": size, "kv_tokens": context} for size in jump for context in (100 * size, 300 * size)]


# Iteration costs of the embedded model's order on 2 CPU cores: 60-90 ms a decode step, 30 ms + 0.5 ms a prompt token.
CPU_COST = CostModel(prefill=LinearCost(a=0.03, b=5e-4, c=0.0, d=0.0), decode=LinearCost(a=0.06, b=0.0, c=0.01, d=1e-6))


def _served(queue: str, preemptive: bool, interval_s: float = 0.8):
    """A "live run" to replay: the simulator's run of 24 requests arriving every ``interval_s`` on average (0.8: queues
    form); every answer ends with a stop token but the last."""
    rng = np.random.default_rng(5)
    trace = pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(interval_s, 24)),
                          "prompt_tokens": rng.integers(20, 400, 24), "output_tokens": rng.integers(1, 80, 24)})
    predictor = TraceColumnPredictor(trace["output_tokens"].to_numpy(float) * rng.uniform(0.5, 2.0, 24))
    run = simulate(trace, predictor, _config(queue, preemptive).with_(cost=CPU_COST))
    run.requests["finished"] = np.arange(24) < 23
    return run, predictor


@pytest.mark.parametrize("queue,preemptive", [("fcfs", False), ("sjf", False), ("srpt", True)])
def test_a_replay_without_the_model_is_the_simulator_and_follows_the_machine_s_speed(queue, preemptive):
    run, predictor = _served(queue, preemptive)
    again = replay(run, predictor, CostClock(run.config.cost))
    for column in ("first_token_s", "finish_s", "preemptions", "output_tokens", "finished"):
        np.testing.assert_allclose(again.requests[column], run.requests[column], rtol=0, atol=1e-9)
    if preemptive:
        assert again.requests["preemptions"].sum() > 0  # an evicted request came back and kept its answer length
    # at a steady 1.5x, the replay is the simulator on a cost model 1.5x as slow, and measures that speed back
    steady = replay(run, predictor, CostClock(run.config.cost, MeasuredSpeed(np.array([0.0]), np.array([1.5]))))
    slower = simulate(run.requests[["arrival_s", "prompt_tokens", "output_tokens"]], predictor,
                      run.config.with_(cost=run.config.cost.scaled(1.5)))
    np.testing.assert_allclose(steady.requests["finish_s"], slower.requests["finish_s"], rtol=1e-9)
    np.testing.assert_allclose(speed_over_time(steady, 2.0).factors, 1.5)
    assert iteration_ratio(steady) == pytest.approx(1.5)


def test_the_speed_over_time_follows_a_slowdown():
    run, predictor = _served("fcfs", False)
    ramp = MeasuredSpeed(np.array([0.0, 10.0, 11.0]), np.array([1.0, 1.0, 2.0]))  # twice as slow from 11 s on
    slowed = replay(run, predictor, CostClock(run.config.cost, ramp))
    speed = speed_over_time(slowed, 1.0)
    assert np.allclose(speed.factors[speed.times_s < 9.0], 1.0)
    assert np.allclose(speed.factors[speed.times_s > 12.0], 2.0)
    assert speed.at(-1.0) == pytest.approx(1.0) and speed.at(1e9) == pytest.approx(2.0)  # the end values outside
    assert slowed.requests["finish_s"].max() > run.requests["finish_s"].max()
    with pytest.raises(ValueError, match="window must be positive"):
        speed_over_time(slowed, 0.0)
    with pytest.raises(ValueError, match="one answer length"):
        ReplayEngine([3, 0], [True, True])


def _median_ttft(result) -> float:
    q = result.requests
    return float(np.median(q["first_token_s"] - q["arrival_s"]))


def test_the_machine_s_speed_over_time_does_not_hide_a_wrong_cost_model():
    """A run on a machine 1.7x as slow as the cost model, in every phase alike, is replayed exactly at its speed over
    time; a run whose prefills cost 3x what the model says (the same decode) still misses its first tokens: 2-second
    windows hold a prefill among many decode steps."""
    run, predictor = _served("fcfs", False, interval_s=3.0)  # light: a first token is mostly its prefill
    cost = run.config.cost
    prefill_dearer = CostModel(prefill=cost.scaled(3.0).prefill, decode=cost.decode)
    errors = {}
    for name, machine in (("slower", cost.scaled(1.7)), ("prefill dearer", prefill_dearer)):
        real = replay(run, predictor, CostClock(machine))  # what "ran", read against ``cost``
        again = replay(real, predictor, CostClock(cost, speed_over_time(real, 2.0)))
        errors[name] = _median_ttft(again) / _median_ttft(real) - 1
    assert abs(errors["slower"]) < 1e-9
    assert errors["prefill dearer"] < -0.4


def test_the_live_server_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="one colocated instance"):
        check_live_config(SimConfig())
    with pytest.raises(ValueError, match="chunked prefill"):
        check_live_config(_config("fcfs", batch=3).with_(chunk_tokens=512))
