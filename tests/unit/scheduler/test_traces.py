"""Trace importers (every format, column mappings), validation, limits, re-timing, filters and storage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenscope.analysis.scheduler.traces import (
    TraceFormat,
    UnknownTraceFormat,
    column_mapping,
    filter_trace,
    from_runs,
    load_trace_file,
    poisson_retime,
    read_trace_table,
    trace_files,
    trace_hash,
)
from lenscope.jobs.scheduler.replay import SHIPPED_TRACES, SPLITWISE_PROFILE, builtin_trace_files

TRACES = SHIPPED_TRACES


def test_azure_conversation_trace():
    trace = load_trace_file(SHIPPED_TRACES / "AzureLLMInferenceTrace_conv.csv")
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
    from lenscope.analysis.scheduler.engine import validate_trace

    with pytest.raises(ValueError, match=r"trace rows \[1\] need arrivals from 0"):
        validate_trace(pd.DataFrame({"arrival_s": [0.0, 1e300], "prompt_tokens": [5, 5], "output_tokens": [3, 3]}))


def test_upload_limits():
    data = b"arrival,prompt_tokens,output_tokens\n" + b"0,1,1\n" * 50
    with pytest.raises(ValueError, match="limit is"):
        read_trace_table(data, max_bytes=100)
    with pytest.raises(ValueError, match="more than 10 rows"):
        read_trace_table(data, max_rows=10)
    assert len(read_trace_table(data)) == 50
    jsonl = b'{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1}\n' * 50
    with pytest.raises(ValueError, match="limit is"):
        read_trace_table(jsonl, max_bytes=100)
    with pytest.raises(ValueError, match="more than 10 rows"):
        read_trace_table(jsonl, max_rows=10)
    assert len(load_trace_file(jsonl)) == 50


def test_retime_filters_and_runs(store):
    trace = load_trace_file(SHIPPED_TRACES / "AzureLLMInferenceTrace_code.csv")
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


def test_trace_discovery_skips_profiles():
    names = [p.name for p in trace_files(TRACES)]
    assert "AzureLLMInferenceTrace_conv.csv" in names and "sharegpt_llama31_8b_300_lengths.csv" in names
    assert "splitwise_perf_model.csv" not in names
    assert trace_files(TRACES / "missing") == []


def test_builtin_traces_are_shipped_with_their_license():
    """Every file the app, the CLI's defaults and the tests read ships in data/traces with its source and license,
    and the built-in list is exactly the shipped traces (the Splitwise profile is not a trace)."""
    shipped = trace_files(SHIPPED_TRACES)
    assert [p.name for p in shipped] == ["AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv",
                                         "sharegpt_llama31_8b_300_lengths.csv"]
    assert builtin_trace_files() == shipped
    assert SPLITWISE_PROFILE.parent == SHIPPED_TRACES and SPLITWISE_PROFILE.is_file()
    readme = (SHIPPED_TRACES / "README.md").read_text()
    for name in [p.name for p in shipped] + [SPLITWISE_PROFILE.name]:
        assert f"`{name}`" in readme
    for source in ("Azure/AzurePublicDataset", "casys-kaist/LLMServingSim", "Mutinifni/splitwise-sim"):
        assert source in readme
    assert "CC-BY-4.0" in readme and readme.count("MIT") >= 2 and "ContextTokens" in readme
    assert all(p.stat().st_size < 5 * 2**20 for p in [*shipped, SPLITWISE_PROFILE])


MOONCAKE = (b'{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}\n'
            b'{"timestamp": 3052, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14]}\n'
            b'\n'
            b'{"timestamp": 1000, "input_length": 10, "output_length": 5, "hash_ids": [7]}\n')


def test_mooncake_jsonl_keeps_block_hashes():
    trace = load_trace_file(MOONCAKE)
    assert trace["arrival_s"].tolist() == [0.0, 1.0, 3.052]  # ms -> s, sorted
    assert trace["prompt_tokens"].tolist() == [6755, 10, 7319] and trace["output_tokens"].tolist() == [500, 5, 490]
    assert trace["hash_ids"].tolist() == [(0, 1, 2), (7,), (0, 14)]
    assert trace_hash(trace) != trace_hash(trace.assign(hash_ids=[(0, 1, 2), (8,), (0, 14)]))
    assert trace_hash(trace) != trace_hash(trace.drop(columns="hash_ids"))
    without = load_trace_file(b'{"timestamp": 5, "input_length": 3, "output_length": 2}\n')
    assert "hash_ids" not in without and without["arrival_s"].tolist() == [0.0]


def test_jsonl_errors_name_their_lines():
    with pytest.raises(ValueError, match=r"2 line\(s\) not a JSON object \(line 3: Expecting.*; line 4: not a JSON"):
        load_trace_file(MOONCAKE.replace(b"\n\n", b"\n{oops\n[1, 2]\n"))
    bad = (b'{"timestamp": 0, "input_length": 0, "output_length": 4, "hash_ids": "x"}\n'
           b'{"timestamp": -1, "input_length": 3, "output_length": 4, "hash_ids": [1, 2.5]}\n'
           b'{"timestamp": 9, "input_length": 3, "hash_ids": [1]}\n')
    with pytest.raises(ValueError) as err:
        load_trace_file(bad)
    msg = str(err.value)
    assert "'timestamp' needs non-negative numbers (ms)" in msg and "lines 2 (1 rows)" in msg
    assert "'input_length' needs whole numbers from 1 to 10,000,000: lines 1 (1 rows)" in msg
    assert "'output_length' needs whole numbers from 1 to 10,000,000: lines 3 (1 rows)" in msg
    assert "'hash_ids' needs lists of integer block hashes: lines 1, 2 (2 rows)" in msg


def test_burstgpt_drops_failed_requests_and_says_how_many():
    data = (b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            b"5,ChatGPT,472,18,490,Conversation log\n"
            b"45,ChatGPT,1087,0,1087,Conversation log\n"
            b"118,GPT-4,417,276,693,API log\n"
            b"120,GPT-4,0,0,0,API log\n")
    trace = load_trace_file(data)
    assert trace.to_dict("list") == {"arrival_s": [0.0, 113.0], "prompt_tokens": [472, 417],
                                     "output_tokens": [18, 276]}
    assert trace.attrs["notes"] == ["left out 2 failed request(s) ('Response tokens' 0) of 4"]
    assert filter_trace(trace, first_n=1).attrs["notes"] == trace.attrs["notes"]
    with pytest.raises(ValueError, match=r"'Request tokens' needs whole numbers.*lines 3 \(1 rows\)"):
        load_trace_file(data.replace(b"45,ChatGPT,1087,0", b"45,ChatGPT,0,9"))
    with pytest.raises(ValueError, match=r"no requests \(left out 1 failed request"):
        load_trace_file(b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,x,5,0,5,y\n")


def test_azure_2024_timestamps_with_utc_offset():
    trace = load_trace_file(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                            b"2024-05-10 00:00:01.509930+00:00,10,50\n"
                            b"2024-05-10 00:00:00.009930+00:00,100,5\n"
                            b"2024-05-10 02:00:00.009930+02:00,7,7\n")
    assert trace["arrival_s"].tolist() == pytest.approx([0.0, 0.0, 1.5])
    assert trace["prompt_tokens"].tolist() == [100, 7, 10]


def test_column_mapping_reads_any_csv_or_jsonl():
    csv = b"t,in,out,tag\n1000,5,6,a\n2500,7,8,b\n"
    mapped = load_trace_file(csv, column_mapping("arrival=t, prompt=in, output=out", "ms"))
    assert mapped.to_dict("list") == {"arrival_s": [0.0, 1.5], "prompt_tokens": [5, 7], "output_tokens": [6, 8]}
    jsonl = b'{"at": 2e9, "p": 5, "o": 6, "blocks": [3]}\n{"at": 5e9, "p": 7, "o": 8, "blocks": []}\n'
    mapped = load_trace_file(jsonl, TraceFormat("at", "p", "o", "ns", hash_ids="blocks"))
    assert mapped["arrival_s"].tolist() == [0.0, 3.0] and mapped["hash_ids"].tolist() == [(3,), ()]
    blocks = column_mapping("arrival=t,prompt=in,output=out,hash_ids=blocks")
    assert load_trace_file(b't,in,out,blocks\n0,5,6,"[1, 2]"\n', blocks)["hash_ids"].tolist() == [(1, 2)]
    with pytest.raises(ValueError, match="no column 'TIMESTAMP', 'ContextTokens', 'GeneratedTokens'"):
        load_trace_file(csv, "azure")
    with pytest.raises(UnknownTraceFormat) as err:
        load_trace_file(csv)
    assert err.value.columns == ["t", "in", "out", "tag"] and "column mapping" in str(err.value)
    with pytest.raises(ValueError, match=r"no column 'zz'; its columns are \['t', 'in', 'out', 'tag'\]"):
        load_trace_file(csv, column_mapping("arrival=t,prompt=in,output=zz"))
    with pytest.raises(ValueError, match=r"'tag' needs whole numbers.*lines 2, 3 \(2 rows\)"):
        load_trace_file(csv, column_mapping("arrival=t,prompt=in,output=tag"))
    for text, why in [("arrival=t,prompt=in", "lacks output"), ("arrival=t,prompt=in,out=x", "got 'out=x'"),
                      ("arrival=t,arrival=u,prompt=in,output=out", "each key once"), ("", "KEY=COLUMN")]:
        with pytest.raises(ValueError, match=why):
            column_mapping(text)
    with pytest.raises(ValueError, match="time unit must be one of s, ms, us, ns, datetime"):
        column_mapping("arrival=t,prompt=in,output=out", "hours")


def test_cli_simulate_reads_mooncake_burstgpt_and_mapped_traces(data_dir, tmp_path, capsys):
    from lenscope.cli import main

    (tmp_path / "mooncake.jsonl").write_bytes(MOONCAKE)
    assert main(["simulate", "--trace", str(tmp_path / "mooncake.jsonl")]) == 0
    assert "| 3 requests" in capsys.readouterr().out
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n")
    assert main(["simulate", "--trace", str(burst)]) == 0
    assert "note: left out 1 failed request(s) ('Response tokens' 0) of 2" in capsys.readouterr().out
    mapped = tmp_path / "mine.csv"
    mapped.write_text("t,in,out\n0,5,6\n1500,7,8\n")
    argv = ["simulate", "--trace", str(mapped), "--columns", "arrival=t,prompt=in,output=out", "--time-unit", "ms"]
    assert main(argv) == 0 and "| 2 requests" in capsys.readouterr().out
    assert main(argv[:3]) == 2 and "give a column mapping" in capsys.readouterr().err
    assert main([*argv[:4], "arrival=t,prompt=in,output=zz"]) == 2
    assert "no column 'zz'" in capsys.readouterr().err
    assert main([*argv[:3], "--time-unit", "ms"]) == 2 and "--time-unit goes with --columns" in capsys.readouterr().err


# -- Vidur and the serving benchmarks' result files (hand-written after their writers' field names) ---------------

VIDUR = b"arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.314579,396,109\n2.5,91,16\n"


def _vllm_result(**changes) -> dict:
    """A vLLM benchmark_serving.py --save-result file's keys (one JSON object; failed requests have output 0)."""
    result = {"date": "20250101-120000", "backend": "vllm", "model_id": "m", "tokenizer_id": "m", "num_prompts": 4,
              "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None, "duration": 3.2, "completed": 3,
              "input_lens": [10, 20, 30, 40], "output_lens": [5, 0, 7, 8], "ttfts": [0.1, 0.0, 0.2, 0.3],
              "itls": [[0.01], [], [0.02], [0.03]], "generated_texts": ["a", "", "b", "c"],
              "errors": ["", "timeout", "", ""]}
    return {**result, **changes}


def _sglang_line(**changes) -> dict:
    """One line of SGLang's bench_serving --output-file JSONL (--output-details: with the per-request arrays)."""
    line = {"backend": "sglang", "dataset_name": "sharegpt", "request_rate": float("inf"), "max_concurrency": 8,
            "duration": 1.5, "completed": 2, "input_lens": [3, 4], "output_lens": [1, 2], "ttfts": [0.1, 0.2],
            "itls": [[], [0.01]], "generated_texts": ["x", "yz"], "errors": ["", ""]}
    return {**line, **changes}


def _json(record: dict, **dumps) -> bytes:
    import json

    return json.dumps(record, **dumps).encode()


def test_vidur_trace_reads_without_a_mapping():
    trace = load_trace_file(VIDUR)
    assert trace.to_dict("list") == {"arrival_s": [0.0, 2.5, 4.314579], "prompt_tokens": [374, 91, 396],
                                     "output_tokens": [44, 16, 109]}


def test_vllm_result_arrivals_drawn_from_its_request_rate_and_failed_requests_left_out():
    trace = load_trace_file(_json(_vllm_result()))
    assert trace["prompt_tokens"].tolist() == [10, 30, 40] and trace["output_tokens"].tolist() == [5, 7, 8]
    assert trace["arrival_s"].iloc[0] == 0 and trace["arrival_s"].is_monotonic_increasing
    notes = trace.attrs["notes"]
    assert "vLLM benchmark result" in notes[0] and "Poisson process at its request_rate 2 req/s (seed 0)" in notes[0]
    assert notes[1] == "left out 1 failed request(s) ('output_lens' 0) of 4"
    assert trace_hash(trace) == trace_hash(load_trace_file(_json(_vllm_result(), indent=2)))  # seeded; pretty JSON
    gamma = load_trace_file(_json(_vllm_result(burstiness=0.5)))
    assert "gamma process (burstiness 0.5)" in gamma.attrs["notes"][0]
    flat = load_trace_file(_json(_vllm_result(request_rate="inf", max_concurrency=4)))
    assert flat["arrival_s"].tolist() == [0.0, 0.0, 0.0]
    assert "every request arrives at 0 s" in flat.attrs["notes"][0] and "max_concurrency 4" in flat.attrs["notes"][0]


def test_vllm_result_with_start_times_replays_when_requests_were_due():
    trace = load_trace_file(_json(_vllm_result(start_times=[100.0, 100.5, 101.0, 102.0], queue_times=[0, 0, 0.5, 0])))
    assert trace["arrival_s"].tolist() == [0.0, 0.5, 2.0]
    assert "start_times less queue_times" in trace.attrs["notes"][0]
    sent = load_trace_file(_json(_vllm_result(start_times=[100.0, 100.5, 101.0, 102.0])))
    assert sent["arrival_s"].tolist() == [0.0, 1.0, 2.0]


def test_sglang_jsonl_reads_its_one_detailed_run():
    summary = _json({k: v for k, v in _sglang_line().items() if k not in ("input_lens", "output_lens", "ttfts",
                                                                            "itls", "generated_texts", "errors")})
    trace = load_trace_file(summary + b"\n" + _json(_sglang_line()) + b"\n")
    assert trace.to_dict("list") == {"arrival_s": [0.0, 0.0], "prompt_tokens": [3, 4], "output_tokens": [1, 2]}
    assert trace.attrs["notes"][0].startswith("SGLang benchmark result (line 2 of 2): request_rate inf")
    assert "max_concurrency 8 is not replayed" in trace.attrs["notes"][0]
    poisson = load_trace_file(_json(_sglang_line(request_rate=4)))
    assert "Poisson process at its request_rate 4 req/s" in poisson.attrs["notes"][0]


@pytest.mark.parametrize(("data", "why"), [
    (_json(_vllm_result(output_lens=[1, 2])), r"input_lens and output_lens of the same length \(got 4 and 2\)"),
    (_json(_vllm_result(input_lens=["x", 1, 3, 2.5])), r"'input_lens' needs whole numbers.*at index 0, 3 \(2 rows\)"),
    (_json(_vllm_result(request_rate=None)), "no arrival times .* no usable request_rate"),
    (_json(_vllm_result(input_lens=[], output_lens=[])), "no requests"),
    (_json({"backend": "vllm", "request_rate": 1, "duration": 2.0}), "no per-request lengths.*--save-detailed"),
    (_json(_sglang_line()) + b"\n" + _json(_sglang_line()), r"2 SGLang benchmark runs \(lines 1, 2\).*sed -n 2p"),
])
def test_malformed_benchmark_results_are_refused_in_one_line(data, why):
    with pytest.raises(ValueError, match=why) as err:
        load_trace_file(data, name="bench.json")
    assert str(err.value).startswith("trace file 'bench.json': ") and "\n" not in str(err.value)


def test_benchmark_results_are_discovered_in_a_folder(tmp_path):
    (tmp_path / "vllm-2qps.json").write_bytes(_json(_vllm_result()))
    (tmp_path / "sglang.jsonl").write_bytes(_json(_sglang_line()) + b"\n")
    (tmp_path / "vidur.csv").write_bytes(VIDUR)
    (tmp_path / "config.json").write_text('{"not": "a trace"}')
    assert [p.name for p in trace_files(tmp_path)] == ["sglang.jsonl", "vidur.csv", "vllm-2qps.json"]
