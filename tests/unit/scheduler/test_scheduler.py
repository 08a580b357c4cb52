"""Scheduler simulator: conservation, determinism, policy behaviour, KV limits, information hiding, CLI."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.scheduler import SimConfig, make_predictor, simulate
from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, fit_cost_model
from lenscope.analysis.scheduler.engine import Simulator
from lenscope.analysis.scheduler.metrics import padding_ratio, summarize
from lenscope.analysis.scheduler.policies import QueuePolicy, RequestView
from lenscope.analysis.scheduler.predictors import NoisyOraclePredictor, StoredPredictor
from lenscope.jobs.scheduler.replay import SHIPPED_TRACES

TRACES = SHIPPED_TRACES


def random_trace(n: int = 400, qps: float = 60.0, seed: int = 0, max_out: int = 1500) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(1 / qps, n)),
                         "prompt_tokens": rng.integers(5, 400, n), "output_tokens": rng.integers(1, max_out, n)})


def hand_trace(lengths, gap: float = 0.0) -> pd.DataFrame:
    n = len(lengths)
    return pd.DataFrame({"arrival_s": np.arange(n) * gap, "prompt_tokens": [8] * n, "output_tokens": lengths})


ONE_SLOT = SimConfig(mode="colocated", n_decode=1, max_batch_size=1)
CONFIGS = [SimConfig(), SimConfig(dispatch="lb", queue="srpt", kv_capacity_tokens=20_000),
           SimConfig(mode="colocated", n_decode=2, queue="sjf", kv_capacity_tokens=12_000, aging_s=5.0),
           SimConfig(batching="static", max_batch_size=16, dispatch="random"),
           SimConfig(mode="colocated", n_decode=2, queue="srpt", kv_capacity_tokens=12_000, chunk_tokens=512,
                     preemptive=True, max_preemptions=3),
           SimConfig(prefill_queue="spf", queue="srpt", max_batch_size=16, preemptive=True, preempt_limit=0.5)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
def test_every_request_finishes_exactly_once(config):
    trace = random_trace()
    completions = Counter()

    class Counting(Simulator):
        def completed(self, ids, now):
            completions.update(ids)
            super().completed(ids, now)

    sim = Counting(trace, make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=100), config)
    r = sim.run().requests
    assert completions == Counter(range(len(trace)))
    assert (sim.gen == trace["output_tokens"].to_numpy()).all()
    assert (r["arrival_s"] <= r["first_token_s"]).all() and (r["first_token_s"] <= r["finish_s"]).all()


def test_same_seed_same_result_other_seed_differs():
    trace = random_trace(seed=3)
    config = SimConfig(dispatch="random", queue="sjf", seed=7)

    def run(seed):
        pred = make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=200, seed=seed)
        return simulate(trace, pred, config.with_(seed=seed)).requests

    pd.testing.assert_frame_equal(run(7), run(7))
    assert not run(7)["finish_s"].equals(run(8)["finish_s"])


def test_fcfs_serves_in_arrival_order_and_sjf_by_prediction():
    trace = hand_trace([50, 10, 30, 20], gap=0.001)
    oracle = make_predictor("oracle", trace["output_tokens"].to_numpy())
    fcfs = simulate(trace, oracle, ONE_SLOT).requests
    assert fcfs.sort_values("finish_s")["rid"].tolist() == [0, 1, 2, 3]
    sjf = simulate(trace, oracle, ONE_SLOT.with_(queue="sjf")).requests
    # request 0 starts alone; the others then go shortest first
    assert sjf.sort_values("finish_s")["rid"].tolist() == [0, 1, 3, 2]


def test_sjf_beats_fcfs_on_mean_latency():
    # a warm-up request occupies the single slot while a long job and four short ones queue up
    trace = hand_trace([5, 400, 20, 20, 20, 20], gap=0.001)
    oracle = make_predictor("oracle", trace["output_tokens"].to_numpy())
    fcfs = simulate(trace, oracle, ONE_SLOT)
    sjf = simulate(trace, oracle, ONE_SLOT.with_(queue="sjf"))
    assert fcfs.requests.sort_values("finish_s")["rid"].tolist() == [0, 1, 2, 3, 4, 5]
    assert sjf.requests.sort_values("finish_s")["rid"].tolist() == [0, 2, 3, 4, 5, 1]
    assert summarize(sjf)["mean_jct_s"] < 0.6 * summarize(fcfs)["mean_jct_s"]


def test_static_batching_padding_ratio():
    trace = hand_trace([3, 10, 20, 30, 40], gap=0.0001)  # the first request runs alone, the rest queue
    result = simulate(trace, make_predictor("oracle", trace["output_tokens"].to_numpy()),
                      SimConfig(mode="colocated", n_decode=1, batching="static", max_batch_size=4))
    assert result.batches.to_dict("records") == [{"size": 1, "sum_len": 3, "max_len": 3},
                                                 {"size": 4, "sum_len": 100, "max_len": 40}]
    assert padding_ratio(result.batches.iloc[1:]) == pytest.approx(1 - 100 / (4 * 40))
    assert summarize(result)["padding_ratio"] == pytest.approx(1 - 103 / (3 + 160))
    assert result.requests["finish_s"].iloc[1:].nunique() == 1  # members return when the batch ends


def test_kv_capacity_never_exceeded_and_preemption_happens():
    trace = random_trace(n=300, qps=200, seed=5)
    cap = 16_000
    result = simulate(trace, make_predictor("oracle", trace["output_tokens"].to_numpy()),
                      SimConfig(kv_capacity_tokens=cap, queue="srpt"))
    decode = result.segments[result.segments["role"] == "decode"]
    assert len(decode) > 100
    assert decode["kv_tokens"].max() <= cap
    assert decode["kv_tokens"].max() > 0.9 * cap  # the cache really filled up
    assert result.requests["preemptions"].sum() > 0


def test_requests_too_big_for_the_cache_are_rejected():
    trace = hand_trace([5000])
    with pytest.raises(ValueError, match="KV cache"):
        simulate(trace, make_predictor("oracle", [5000]), SimConfig(kv_capacity_tokens=4096))


def test_policies_only_see_predictions():
    fields = {f.name for f in dataclasses.fields(RequestView)}
    assert fields == {"rid", "arrival_s", "prompt_tokens", "generated", "predicted_total", "predicted_remaining"}
    view = RequestView(0, 0.0, 5, 1, 10.0, 9.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.predicted_total = 3.0  # type: ignore[misc]
    trace = random_trace(n=200, qps=300, seed=2)
    seen: list[RequestView] = []

    class Spy(QueuePolicy):
        def key(self, request):
            seen.append(request)
            assert not hasattr(request, "output_tokens")
            return request.predicted_total

    sim = Simulator(trace, make_predictor("constant", trace["output_tokens"].to_numpy(), constant=77.0),
                    SimConfig(queue="sjf", kv_capacity_tokens=20_000))
    sim.queue_policy = Spy()
    for inst in sim.decode:
        inst.waiting.policy = sim.queue_policy
    sim.run()
    assert seen and all(v.predicted_total == 77.0 for v in seen)
    # a constant prediction carries no information: SJF then orders exactly like FCFS
    fcfs = simulate(trace, make_predictor("constant", trace["output_tokens"].to_numpy(), constant=77.0), SimConfig())
    sjf = simulate(trace, make_predictor("constant", trace["output_tokens"].to_numpy(), constant=77.0),
                   SimConfig(queue="sjf"))
    assert np.allclose(fcfs.requests["finish_s"], sjf.requests["finish_s"])


def test_lb_balances_predicted_load_better_than_rr():
    trace = random_trace(n=600, qps=400, seed=9, max_out=2000)
    oracle = make_predictor("oracle", trace["output_tokens"].to_numpy())
    tokens = {}
    for d in ("rr", "lb"):
        r = simulate(trace, oracle, SimConfig(dispatch=d)).requests
        tokens[d] = r.groupby("decode_instance")["output_tokens"].sum()
    assert tokens["lb"].std() < tokens["rr"].std()


def test_plp_updates_of_predictors():
    noisy = NoisyOraclePredictor(np.array([500.0]), mae=40, seed=1, update_every=32)
    assert noisy.remaining(0, 10) == pytest.approx(max(noisy.static(0) - 10, 1))
    redrawn = [noisy.remaining(0, 32 * k) for k in range(1, 6)]
    assert len(set(np.round(np.array(redrawn) + 32 * np.arange(1, 6), 6))) > 1  # fresh noise per update
    assert noisy.remaining(0, 64) == noisy.remaining(0, 64)
    preds = pd.DataFrame({"run_id": [7, 7, 7], "step": [0, 16, 32], "predicted": [100.0, 40.0, 5.0]})
    stored = StoredPredictor(np.array([7]), preds)
    assert stored.static(0) == 100.0
    assert [stored.remaining(0, g) for g in (0, 10, 16, 20, 40)] == [100.0, 90.0, 40.0, 36.0, 1.0]
    with pytest.raises(ValueError, match="step-0"):
        StoredPredictor(np.array([8]), preds)
    mixed = pd.DataFrame({"run_id": [3, 7, 3, 7, 7], "step": [8, 32, 0, 0, 16],  # runs interleaved, steps unsorted
                          "predicted": [30.0, 5.0, 50.0, 100.0, 40.0]})
    both = StoredPredictor(np.array([7, 3, 7]), mixed)
    assert [both.static(i) for i in range(3)] == [100.0, 50.0, 100.0]
    assert both.remaining(1, 9) == 29.0 and both.remaining(2, 16) == 40.0


def test_noise_mae_is_as_configured():
    true = np.random.default_rng(0).integers(200, 2000, 20_000).astype(float)
    noisy = NoisyOraclePredictor(true, mae=50, seed=0)
    err = np.abs(np.array([noisy.static(i) for i in range(len(true))]) - true).mean()
    assert err == pytest.approx(50, rel=0.05)


def test_cost_model_closed_forms_and_calibration():
    dec = DEFAULT_COST.decode
    steps = [dec.step_s(10, 10, 5000 + 10 * j) for j in range(50)]
    assert dec.decode_run_s(10, 5000, 50) == pytest.approx(sum(steps))
    for elapsed in (1e-4, 0.05, 0.3):
        k = dec.decode_steps_done(10, 5000, elapsed)
        assert dec.decode_run_s(10, 5000, k) >= elapsed > dec.decode_run_s(10, 5000, k - 1) or k == 1
    fit = fit_cost_model(pd.read_csv(TRACES / "splitwise_perf_model.csv"), "llama2-70b", "h100-80gb", 8)
    assert fit.decode_mape < 0.1 and fit.prefill_mape < 0.3
    assert fit.cost.decode.a > 0.01 and fit.cost.decode.d > 0


def test_cli_simulate_end_to_end(data_dir, tmp_path, capsys):
    from lenscope.cli import main
    from lenscope.store.store import Store

    out = tmp_path / "lat.csv"
    argv = ["simulate", "--trace", str(TRACES / "sharegpt_llama31_8b_300_lengths.csv"), "--dispatch", "lb",
            "--queue", "sjf", "--predictor", "oracle-noise", "--noise-mae", "50", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "LB+SJF 1P+3D continuous | oracle+noise (MAE 50) | 300 requests" in text and "short" in text
    assert len(pd.read_csv(out)) == 300
    assert len(Store().results_frame("scheduler_sim")) == 1
    assert main(argv) == 0 and "(cached)" in capsys.readouterr().out
    cost = tmp_path / "cost.json"
    assert main(["calibrate-cost", "--profile", str(TRACES / "splitwise_perf_model.csv"), "--model", "llama2-70b",
                 "--hardware", "a100-80gb", "--tp", "4", "--out", str(cost)]) == 0
    assert main(["simulate", "--trace", str(TRACES / "sharegpt_llama31_8b_300_lengths.csv"), "--cost-json",
                 str(cost), "--first-n", "50", "--qps", "5"]) == 0
    assert main(["simulate", "--trace", str(tmp_path / "missing.csv")]) == 2


@pytest.mark.parametrize("config", [
    SimConfig(mode="colocated", n_decode=3, dispatch="lb", queue="sjf", preemptive=True, kv_capacity_tokens=16_384),
    SimConfig(mode="colocated", n_decode=3, dispatch="lb", queue="sjf", chunk_tokens=512),
    SimConfig(n_decode=2, dispatch="lb", queue="srpt", preemptive=True)])
def test_incremental_predicted_load_equals_the_direct_sum(config, monkeypatch):
    """Instances keep the predicted load of their running requests from a sorted list and a running sum; at every
    read it equals the direct sum of max(predicted total - generated, 1) (chunked prefill adds its prefilling
    requests' terms to it)."""
    from lenscope.analysis.scheduler.instances import ContinuousInstance

    incremental, reads = ContinuousInstance._running_load, []

    def checked(self) -> float:
        load = incremental(self)
        sim = self.sim
        remaining = [sim.pred_list[i] - (g + self.steps) for i, g in zip(self.running, self._g)]
        reads.append((load, sum(max(r, 1.0) for r in remaining), sum(r <= 1.0 for r in remaining)))
        return load

    monkeypatch.setattr(ContinuousInstance, "_running_load", checked)
    rng = np.random.default_rng(0)
    n = 400
    trace = pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, 20, n)), "prompt_tokens": rng.integers(20, 900, n),
                          "output_tokens": rng.integers(1, 400, n)})
    predictor = make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=80, seed=0)
    simulate(trace, predictor, config)
    loads, direct, floored = np.array(reads).T
    assert len(reads) > 100 and (floored > 0).any() and (floored == 0).any()  # both branches of the floor read
    np.testing.assert_allclose(loads, direct, rtol=1e-9, atol=1e-9)
