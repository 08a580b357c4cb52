"""The stage reading of a simulation (which stage held requests back), the tie rule and its sentences, and the search
for the load where compared policies part."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.scheduler.bottleneck import (
    StageReading,
    classify,
    compare_sentence,
    headline_tie,
    queue_length,
    read_stages,
)
from lenscope.analysis.scheduler.engine import SimConfig, simulate
from lenscope.analysis.scheduler.metrics import summarize
from lenscope.analysis.scheduler.registry import make_predictor
from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.scheduler.parting import parting_load, parting_prefill
from lenscope.jobs.scheduler.replay import PredictorSpec, run_simulation, stage_capacity

RR_FCFS, LB_SJF = ("rr", "fcfs"), ("lb", "sjf")


def chat_trace(n: int, qps: float, prompt: int = 20, seed: int = 0) -> pd.DataFrame:
    """Short prompts, outputs from 10 to 800 tokens (decode-heavy), Poisson arrivals at ``qps``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": prompt, "output_tokens": rng.integers(10, 800, n)})
    return poisson_retime(frame, qps, seed)


def summary_of(trace: pd.DataFrame, config: SimConfig, policy: tuple[str, str]) -> tuple[dict, StageReading]:
    result = simulate(trace, make_predictor("oracle", trace["output_tokens"].to_numpy()),
                      config.with_(dispatch=policy[0], queue=policy[1]))
    reading = read_stages(result)
    return {**summarize(result), **reading.to_summary()}, reading


def test_queue_length_integrates_the_waiting_requests_over_the_run():
    # ready at 0, 1, 2; started at 0.5, 3, 3: 1 waits over [0, 0.5), 1 over [1, 2), 2 over [2, 3) -> (0.5 + 1 + 2) / 4
    mean, most = queue_length(np.array([0.0, 1.0, 2.0]), np.array([0.5, 3.0, 3.0]), 0.0, 4.0)
    assert mean == pytest.approx(0.875) and most == 2
    assert queue_length(np.array([1.0]), np.array([1.0]), 0.0, 2.0) == (0.0, 0)  # started when ready: no wait
    assert classify(0.2, 0.9) == "none" and classify(5.0, 1.0) == "prefill" and classify(0.5, 3.0) == "decode"


def test_a_decode_bound_and_a_prefill_bound_cluster_read_differently():
    decode_bound = SimConfig(n_prefill=1, n_decode=1, max_batch_size=32)
    chat = chat_trace(600, 2.0 * stage_capacity(chat_trace(600, 1.0), decode_bound)[1])
    _, decode = summary_of(chat, decode_bound, RR_FCFS)
    assert decode.bottleneck == "decode" and decode.loaded
    assert decode.decode_queue_mean > 10 * max(decode.prefill_queue_mean, 0.1)
    assert decode.decode_busy > 0.95 and decode.decode_fill > 0.8

    long_prompts = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": 4000, "output_tokens": [5, 40] * 150})
    prefill_bound = SimConfig(n_prefill=1, n_decode=3)
    _, prefill = summary_of(poisson_retime(long_prompts, 20.0), prefill_bound, RR_FCFS)
    assert prefill.bottleneck == "prefill"
    assert prefill.prefill_busy > 0.95 and prefill.prefill_queue_mean > 10 and prefill.decode_queue_mean < 1

    _, idle = summary_of(chat_trace(100, 0.2), decode_bound, RR_FCFS)
    assert idle.bottleneck == "none" and not idle.loaded and idle.decode_queue_mean < 1


def test_colocated_instances_have_one_queue_and_split_their_time():
    config = SimConfig(mode="colocated", n_decode=1, max_batch_size=32)
    _, reading = summary_of(chat_trace(600, 2.0 * stage_capacity(chat_trace(600, 1.0), config)[1]), config, RR_FCFS)
    assert reading.bottleneck == "decode" and reading.prefill_queue_mean == 0.0
    assert 0 < reading.prefill_busy < reading.decode_busy


def test_length_aware_policies_part_where_decode_is_the_bottleneck_and_tie_where_prefill_is():
    decode_bound = SimConfig(n_prefill=1, n_decode=2, max_batch_size=32)
    chat = chat_trace(800, 1.2 * stage_capacity(chat_trace(800, 1.0), decode_bound)[1])
    summaries = [summary_of(chat, decode_bound, p)[0] for p in (RR_FCFS, LB_SJF)]
    tie, sentence = compare_sentence(summaries)
    assert not tie and summaries[1]["short_e2e_p99_s"] < 0.8 * summaries[0]["short_e2e_p99_s"]
    assert sentence.startswith("Look at the short-request P99") and "LB+SJF cuts it from" in sentence
    assert "decode is the bottleneck" in sentence

    long_prompts = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": 4000, "output_tokens": [5, 40] * 150})
    timed = poisson_retime(long_prompts, 20.0)
    summaries = [summary_of(timed, SimConfig(n_prefill=1, n_decode=3), p)[0] for p in (RR_FCFS, LB_SJF)]
    tie, sentence = compare_sentence(summaries)
    assert tie and "because prefill was the bottleneck" in sentence and "order only the decode stage" in sentence


def test_the_tie_rule_and_summaries_stored_before_readings():
    base = {"label": "RR+FCFS 1P+3D continuous", "short_e2e_p99_s": 5.2, "all_e2e_p99_s": 9.0, "mean_jct_s": 3.0}
    close = {**base, "label": "LB+SJF 1P+3D continuous", "short_e2e_p99_s": 5.1}
    assert headline_tie([base, close]) and not headline_tie([base])
    assert not headline_tie([base, {**close, "mean_jct_s": 3.4}])  # one headline number 13 % apart
    assert StageReading.from_summary(base) is None
    tie, sentence = compare_sentence([base, close])
    assert tie and "stored before stage readings were kept" in sentence
    reading = StageReading("none", 0.2, 0.9, 0.05, 0.0, 2, 0.03, 3)
    assert StageReading.from_summary({**base, **reading.to_summary()}) == reading
    tie, sentence = compare_sentence([{**base, **reading.to_summary()}, close])
    assert "the cluster was not loaded" in sentence and "no queue to reorder" in sentence
    assert compare_sentence([base]) == (False, "")


def test_the_search_finds_the_load_where_policies_part(store):
    """An idle cluster ties; the search re-times the trace at rising loads and stops where the policies part, each
    point stored; a prefill-bound shape first gets prefill instances."""
    config = SimConfig(n_prefill=1, n_decode=2, max_batch_size=32)
    idle = chat_trace(800, 1.0)
    configs = [config.with_(dispatch=d, queue=q) for d, q in (RR_FCFS, LB_SJF)]
    assert headline_tie([run_simulation(store, idle, PredictorSpec(), c).summary for c in configs])
    parting = parting_load(store, idle, PredictorSpec(), configs)
    assert parting.qps is not None and parting.qps == parting.tried[-1] and parting.n_prefill == 1
    assert not headline_tie([o.summary for o in parting.outcomes])
    assert parting.note.startswith(f"Measured: the configurations part at {parting.qps:g} QPS")
    again = run_simulation(store, poisson_retime(idle, parting.qps), PredictorSpec(), configs[1])
    assert again.cached and again.summary == parting.outcomes[1].summary
    long_prompts = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": 4000, "output_tokens": [300] * 10})
    assert parting_prefill(long_prompts, SimConfig(n_prefill=1, n_decode=3)) > 1
    assert parting_prefill(long_prompts, SimConfig(mode="colocated", n_prefill=1, n_decode=3)) == 1
    with pytest.raises(ValueError, match="at least two"):
        parting_load(store, idle, PredictorSpec(), configs[:1])
