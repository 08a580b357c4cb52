"""Chunked prefill on colocated instances: hand-worked timings and the per-iteration token budget."""

from __future__ import annotations

import pandas as pd
import pytest

from lenscope.analysis.scheduler import SimConfig, make_predictor, simulate
from lenscope.analysis.scheduler.chunked_prefill import ChunkedPrefillInstance
from lenscope.analysis.scheduler.cost_model import CostModel, LinearCost
from tests.unit.scheduler.test_scheduler import random_trace

# prefill: 10 ms + 0.1 ms per token; decode: 10 ms per iteration whatever the batch
SIMPLE = CostModel(prefill=LinearCost(0.01, 1e-4, 0.0, 0.0), decode=LinearCost(0.01, 0.0, 0.0, 0.0),
                   kv_transfer_base_s=0.0, kv_transfer_per_token_s=0.0)
ONE = SimConfig(mode="colocated", n_decode=1, max_batch_size=8, cost=SIMPLE)


def run(trace: pd.DataFrame, config: SimConfig):
    return simulate(trace, make_predictor("oracle", trace["output_tokens"].to_numpy()), config)


def test_a_long_prompt_is_prefilled_in_chunks_of_the_budget():
    """1,000 prompt tokens in chunks of 256, 256, 256, 232: four iterations, 4 x 10 ms + 1,000 x 0.1 ms = 140 ms
    (one prefill of 110 ms without chunking)."""
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [1]})
    assert run(trace, ONE).requests["first_token_s"].tolist() == pytest.approx([0.11])
    chunked = run(trace, ONE.with_(chunk_tokens=256))
    assert chunked.requests["first_token_s"].tolist() == pytest.approx([0.14])
    assert chunked.segments["kind"].tolist() == ["prefill"] * 4


def test_decodes_keep_going_while_a_long_prompt_is_prefilled():
    """Request 0 (prompt 10, 50 tokens) decodes from 11 ms; request 1 (prompt 1,000) arrives at 50 ms and joins at
    the 51 ms iteration boundary (request 0 has 5 tokens). Without chunking request 0 stalls during the 110 ms
    prefill: 1's first token at 161 ms, 0 done at 161 + 45 x 10 = 611 ms. With a 256-token budget request 0 decodes
    one token per mixed iteration (10 ms + 0.1 ms per chunk token, 255 + 255 + 255 + 235 tokens): 1's first token at
    51 + 40 + 100 = 191 ms, when 0 has 9 tokens; 0 done at 191 + 41 x 10 = 601 ms."""
    trace = pd.DataFrame({"arrival_s": [0.0, 0.05], "prompt_tokens": [10, 1000], "output_tokens": [50, 1]})
    plain = run(trace, ONE).requests
    assert plain["first_token_s"].tolist() == pytest.approx([0.011, 0.161])
    assert plain["finish_s"].tolist() == pytest.approx([0.611, 0.161])
    chunked = run(trace, ONE.with_(chunk_tokens=256))
    assert chunked.requests["first_token_s"].tolist() == pytest.approx([0.011, 0.191])
    assert chunked.requests["finish_s"].tolist() == pytest.approx([0.601, 0.191])
    mixed = chunked.segments[chunked.segments["kind"] == "mixed"]
    assert (mixed["end_s"] - mixed["start_s"]).tolist() == pytest.approx([0.0355, 0.0355, 0.0355, 0.0335])


@pytest.mark.parametrize("budget", [64, 300])
def test_every_iteration_respects_the_token_budget(budget, monkeypatch):
    tokens: list[int] = []
    finish = ChunkedPrefillInstance.finish_iteration

    def spy(self, now):
        if self.kind == "mixed":
            tokens.append(len(self.decoding) + sum(t for _, t in self.chunks))
        else:
            tokens.append(len(self.running) if self.kind == "decode" else 0)
        finish(self, now)

    monkeypatch.setattr(ChunkedPrefillInstance, "finish_iteration", spy)
    trace = random_trace(n=300, qps=80, seed=6)
    config = SimConfig(mode="colocated", n_decode=2, max_batch_size=32, kv_capacity_tokens=20_000,
                       chunk_tokens=budget, queue="srpt", preemptive=True, max_preemptions=2)
    result = run(trace, config)
    assert max(tokens) == budget  # the budget is reached, and never exceeded
    assert result.requests["finish_s"].notna().all()
    decode = result.segments[result.segments["role"] == "decode"]
    assert decode["kv_tokens"].max() <= 20_000


def test_chunked_prefill_needs_colocated_continuous_batching_and_room_for_the_batch():
    for bad in ({"chunk_tokens": 512}, {"mode": "colocated", "batching": "static", "chunk_tokens": 512},
                {"mode": "colocated", "chunk_tokens": 100}):
        with pytest.raises(ValueError, match="chunked prefill"):
            SimConfig(**bad)
    assert SimConfig(mode="colocated", n_decode=2, chunk_tokens=512).label() == "RR+FCFS 2x colo continuous chunked 512"
