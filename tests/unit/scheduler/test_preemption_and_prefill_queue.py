"""Prefill queue policies and preemptive SRPT with TRAIL's limited-preemption guard, on hand-worked cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.scheduler import SimConfig, make_predictor, simulate
from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, CostModel, LinearCost
from lenscope.analysis.scheduler.instances import ContinuousInstance
from tests.unit.scheduler.test_scheduler import random_trace

TOKEN_S = 1e-3
FREE_PREFILL = CostModel(prefill=LinearCost(0.0, 0.0, 0.0, 0.0), decode=LinearCost(TOKEN_S, 0.0, 0.0, 0.0),
                         kv_transfer_base_s=0.0, kv_transfer_per_token_s=0.0)
ONE_SLOT_SRPT = SimConfig(mode="colocated", n_decode=1, max_batch_size=1, cost=FREE_PREFILL, queue="srpt")


def trace_of(arrivals, prompts, outputs) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": arrivals, "prompt_tokens": prompts, "output_tokens": outputs})


def oracle(trace: pd.DataFrame):
    return make_predictor("oracle", trace["output_tokens"].to_numpy())


# prefill queue ------------------------------------------------------------------------------------------------------
ONE_AT_A_TIME = SimConfig(max_prefill_tokens=1)  # every prefill batch holds a single request


def prefill_order(trace: pd.DataFrame, config: SimConfig) -> list[int]:
    return simulate(trace, oracle(trace), config).requests.sort_values("first_token_s")["rid"].tolist()


def test_shortest_prompt_first_on_the_prefill_instance():
    # request 0 starts alone at t=0; 1, 2, 3 queue behind it
    trace = trace_of([0.0, 1e-4, 2e-4, 3e-4], [100, 400, 50, 200], [5, 5, 5, 5])
    assert prefill_order(trace, ONE_AT_A_TIME) == [0, 1, 2, 3]
    result = simulate(trace, oracle(trace), ONE_AT_A_TIME.with_(prefill_queue="spf")).requests
    assert result.sort_values("first_token_s")["rid"].tolist() == [0, 2, 3, 1]
    step = DEFAULT_COST.prefill.step_s  # prefill of p tokens: 10 ms + 0.04 ms per token
    ends = np.cumsum([step(p, 1, 0) for p in (100, 50, 200, 400)])
    assert result.set_index("rid").loc[[0, 2, 3, 1], "first_token_s"].tolist() == pytest.approx(ends.tolist())


def test_shortest_predicted_job_first_on_the_prefill_instance():
    trace = trace_of([0.0, 1e-4, 2e-4, 3e-4], [100, 100, 100, 100], [50, 400, 10, 200])
    assert prefill_order(trace, ONE_AT_A_TIME.with_(prefill_queue="sjf")) == [0, 2, 3, 1]
    assert prefill_order(trace, ONE_AT_A_TIME.with_(prefill_queue="spf")) == [0, 1, 2, 3]  # equal prompts: FCFS


def test_prefill_queue_needs_prefill_instances():
    with pytest.raises(ValueError, match="disaggregated"):
        SimConfig(mode="colocated", prefill_queue="spf")
    with pytest.raises(ValueError, match="prefill queue"):
        SimConfig(prefill_queue="srpt")


# preemptive SRPT -----------------------------------------------------------------------------------------------------
LONG_THEN_SHORT = trace_of([0.0, 0.0055], [1, 1], [100, 10])


def test_preemptive_srpt_hand_worked():
    """Request 0 (100 tokens) runs alone from t=0: first token at 0 (free prefill), then 1 ms per token. Request 1
    (10 tokens) arrives at 5.5 ms; the iteration in flight ends at 6 ms, with 7 tokens of request 0 generated.
    Preemptive: 1 runs 6 -> 15 ms, then 0 is recomputed (free, one token) and needs 92 more: done at 107 ms.
    Without preemption 0 ends at 99 ms and 1 at 108 ms."""
    plain = simulate(LONG_THEN_SHORT, oracle(LONG_THEN_SHORT), ONE_SLOT_SRPT).requests
    assert plain["finish_s"].tolist() == pytest.approx([0.099, 0.108])
    assert plain["preemptions"].tolist() == [0, 0]
    preempting = simulate(LONG_THEN_SHORT, oracle(LONG_THEN_SHORT), ONE_SLOT_SRPT.with_(preemptive=True)).requests
    assert preempting["finish_s"].tolist() == pytest.approx([0.107, 0.015])
    assert preempting["preemptions"].tolist() == [1, 0]


@pytest.mark.parametrize("limit, preempted", [(0.05, False), (0.08, True)])
def test_preempt_limit_is_a_fraction_of_the_predicted_length(limit, preempted):
    """At 6 ms request 0 has generated 7 of its predicted 100 tokens: preemptible while 7 < c * 100."""
    config = ONE_SLOT_SRPT.with_(preemptive=True, preempt_limit=limit)
    result = simulate(LONG_THEN_SHORT, oracle(LONG_THEN_SHORT), config).requests
    assert result["preemptions"].tolist() == ([1, 0] if preempted else [0, 0])


def test_max_preemptions_caps_preemptions_per_request():
    """Three short requests arrive while the long one runs; each would preempt it."""
    trace = trace_of([0.0, 0.0055, 0.0305, 0.0555], [1] * 4, [100, 10, 10, 10])
    unlimited = simulate(trace, oracle(trace), ONE_SLOT_SRPT.with_(preemptive=True)).requests
    assert unlimited["preemptions"].tolist() == [3, 0, 0, 0]
    capped = simulate(trace, oracle(trace), ONE_SLOT_SRPT.with_(preemptive=True, max_preemptions=1)).requests
    assert capped["preemptions"].tolist() == [1, 0, 0, 0]
    assert capped.sort_values("finish_s")["rid"].tolist() == [1, 0, 2, 3]


def test_guard_holds_on_a_busy_cluster(monkeypatch):
    """Every policy preemption happens while the victim is under c x its predicted length, and no request is
    preempted more than allowed (the cache is ample, so there are no memory preemptions)."""
    seen: list[tuple[int, float]] = []
    evict = ContinuousInstance._evict

    def spy(self, victim):
        seen.append((int(self.sim.gen[victim]), float(self.sim.pred_total[victim])))
        evict(self, victim)

    monkeypatch.setattr(ContinuousInstance, "_evict", spy)
    trace = random_trace(n=400, qps=120, seed=4)
    predictor = make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=100)
    config = SimConfig(queue="srpt", max_batch_size=8, preemptive=True, preempt_limit=0.5, max_preemptions=2)
    result = simulate(trace, predictor, config).requests
    assert seen and all(gen < 0.5 * pred for gen, pred in seen)
    assert 0 < result["preemptions"].max() <= 2
    assert np.isfinite(result["finish_s"]).all()


def test_preemptive_srpt_cuts_short_request_latency():
    trace = random_trace(n=400, qps=120, seed=4)
    predictor = oracle(trace)
    base = SimConfig(queue="srpt", max_batch_size=8)
    plain, preempting = (simulate(trace, predictor, c).requests for c in (base, base.with_(preemptive=True)))
    short = trace["output_tokens"] <= trace["output_tokens"].median()
    latency = [(r["finish_s"] - r["arrival_s"])[short].mean() for r in (plain, preempting)]
    assert latency[1] < 0.8 * latency[0]


def test_preemption_options_are_checked_and_labelled():
    with pytest.raises(ValueError, match="continuous"):
        SimConfig(batching="static", preemptive=True)
    with pytest.raises(ValueError, match="preemptive=True"):
        SimConfig(max_preemptions=2)
    with pytest.raises(ValueError, match="positive"):
        SimConfig(preemptive=True, preempt_limit=0.0)
    assert SimConfig(queue="srpt", preemptive=True, preempt_limit=0.5, max_preemptions=2).label() == \
        "RR+SRPT 1P+3D continuous preemptive (c=0.5, max 2)"


def test_new_options_at_their_defaults_keep_stored_result_keys():
    keys = set(SimConfig().to_dict())
    assert not keys & {"prefill_queue", "preemptive", "preempt_limit", "max_preemptions"}
    config = SimConfig(prefill_queue="spf", queue="srpt", preemptive=True, max_preemptions=3)
    assert SimConfig.from_dict(config.to_dict()) == config
    assert SimConfig.from_dict(SimConfig().to_dict()) == SimConfig()
