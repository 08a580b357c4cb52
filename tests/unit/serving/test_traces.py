"""Trace importers, validation, limits, re-timing, filters and storage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.serving.traces import (
    filter_trace,
    from_runs,
    load_trace_file,
    poisson_retime,
    read_trace_csv,
    shared_trace_files,
    trace_hash,
)
from lenscope.jobs.serving import SHARED_TRACES

TRACES = SHARED_TRACES


def test_azure_conversation_trace():
    trace = load_trace_file(TRACES / "AzureLLMInferenceTrace_conv.csv")
    assert len(trace) == 19_366
    assert trace["arrival_s"].iloc[0] == 0 and trace["arrival_s"].is_monotonic_increasing
    assert trace.iloc[0][["prompt_tokens", "output_tokens"]].tolist() == [374, 44]
    assert trace["arrival_s"].iloc[1] == pytest.approx(4.314579, abs=1e-6)
    assert 3000 < trace["arrival_s"].max() < 3700  # about one hour


def test_llmservingsim_trace_in_seconds():
    trace = load_trace_file(TRACES / "sharegpt_llama31_8b_300_lengths.csv")
    raw = pd.read_csv(TRACES / "sharegpt_llama31_8b_300_lengths.csv")
    assert len(trace) == 300
    assert trace["arrival_s"].max() == pytest.approx((raw.arrival_time_ns.max() - raw.arrival_time_ns.min()) / 1e9)
    assert trace["output_tokens"].sum() == raw["output_toks"].sum()


def test_generic_csv_and_hash():
    data = b"arrival,prompt_tokens,output_tokens\n0.5,10,3\n0.0,7,9\n"
    trace = load_trace_file(data)
    assert trace.to_dict("list") == {"arrival_s": [0.0, 0.5], "prompt_tokens": [7, 10], "output_tokens": [9, 3]}
    assert trace_hash(trace) == trace_hash(load_trace_file(data))
    assert trace_hash(trace) != trace_hash(trace.assign(output_tokens=[9, 4]))


def test_malformed_rows_are_listed_by_line():
    bad = b"arrival,prompt_tokens,output_tokens\n0,5,3\n1,x,4\n-2,3,0\n3,2.5,1\n"
    with pytest.raises(ValueError) as err:
        load_trace_file(bad)
    msg = str(err.value)
    assert "'arrival'" in msg and "lines 4 (1 rows)" in msg
    assert "'prompt_tokens'" in msg and "lines 3, 5 (2 rows)" in msg
    assert "'output_tokens'" in msg
    with pytest.raises(ValueError, match="TIMESTAMP.*lines 3"):
        load_trace_file(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,4\nnope,3,4\n")
    with pytest.raises(ValueError, match="unknown trace columns"):
        load_trace_file(b"a,b\n1,2\n")
    with pytest.raises(ValueError, match="no requests"):
        load_trace_file(b"arrival,prompt_tokens,output_tokens\n")


def test_huge_arrivals_and_lengths_are_refused_not_overflowed():
    with pytest.raises(ValueError, match=r"'arrival'.*at most 31,536,000 s.*lines 3 \(1 rows\)"):
        load_trace_file(b"arrival,prompt_tokens,output_tokens\n0,5,3\n1e300,5,3\n")
    with pytest.raises(ValueError, match=r"'output_tokens'.*from 1 to 10,000,000.*lines 2 \(1 rows\)"):
        load_trace_file(b"arrival,prompt_tokens,output_tokens\n0,5,1e20\n")
    from analysis.serving.engine import validate_trace

    with pytest.raises(ValueError, match=r"trace rows \[1\] need arrivals from 0"):
        validate_trace(pd.DataFrame({"arrival_s": [0.0, 1e300], "prompt_tokens": [5, 5], "output_tokens": [3, 3]}))


def test_upload_limits():
    data = b"arrival,prompt_tokens,output_tokens\n" + b"0,1,1\n" * 50
    with pytest.raises(ValueError, match="limit is"):
        read_trace_csv(data, max_bytes=100)
    with pytest.raises(ValueError, match="more than 10 rows"):
        read_trace_csv(data, max_rows=10)
    assert len(read_trace_csv(data)) == 50


def test_retime_filters_and_runs(store):
    trace = load_trace_file(TRACES / "AzureLLMInferenceTrace_code.csv")
    retimed = poisson_retime(trace, qps=20, seed=1)
    gaps = np.diff(retimed["arrival_s"])
    assert np.mean(gaps) == pytest.approx(1 / 20, rel=0.05)
    assert retimed["output_tokens"].tolist() == trace["output_tokens"].tolist()
    short = filter_trace(trace, max_prompt_tokens=50, first_n=100)
    assert len(short) == 100 and short["prompt_tokens"].max() <= 50
    with pytest.raises(ValueError, match="no request"):
        filter_trace(trace, max_prompt_tokens=0)
    runs = pd.DataFrame({"run_id": [4, 5], "prompt_tokens": [20, 30], "output_tokens": [0, 12]})
    from_app = from_runs(runs, qps=2)
    assert from_app["run_id"].tolist() == [4, 5] and from_app["output_tokens"].tolist() == [1, 12]
    tid = store.save_trace("azure code short", "shared", short)
    assert store.load_trace(tid)[["prompt_tokens", "output_tokens"]].equals(short[["prompt_tokens", "output_tokens"]])
    with pytest.raises(ValueError, match="collect"):
        from_runs(runs.iloc[:0], qps=1)


def test_shared_trace_discovery_skips_profiles():
    names = [p.name for p in shared_trace_files(TRACES)]
    assert "AzureLLMInferenceTrace_conv.csv" in names and "sharegpt_llama31_8b_300_lengths.csv" in names
    assert "splitwise_perf_model.csv" not in names
    assert shared_trace_files(TRACES / "missing") == []
