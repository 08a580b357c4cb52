"""The GPU check's pure parts: its sizes, the records each section takes, the budget, the table and the last line."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from lenscope.benchmarks import bench_gpu
from lenscope.benchmarks.bench_gpu import FULL, QUICK, Budget, OverBudget

RESULTS = {"collection": {"engine_tokens_per_s": 1234.56, "vs_hf": 1.314},
           "import": {"tokens_per_s": 24612.4}, "drafter": {"steps_per_s": 3.211},
           "speculative": {"speedup": 1.254, "tau": 2.104}}


def record(prompt: str, scenario: str = "chat", source: str = "sharegpt", finished: bool = True,
           output: tuple[int, ...] = (5, 2)) -> dict:
    """A generations record whose prompt ids are (first character's code, length)."""
    return {"prompt": prompt, "prompt_ids": [ord(prompt[0]), len(prompt)], "output_ids": list(output),
            "scenario": scenario, "source": source, "finished": finished}


def test_the_last_line_names_every_section_or_says_it_failed():
    assert bench_gpu.summary_line("NVIDIA H100 80GB HBM3", RESULTS) == (
        "gpu check on NVIDIA H100 80GB HBM3: collection 1234.6 tok/s (1.31x HF generate), import 24612 tok/s, "
        "drafter 3.21 steps/s, speculative 1.25x plain (tau 2.10)")
    partial = {k: v for k, v in RESULTS.items() if k != "drafter"}
    assert ", drafter failed, " in bench_gpu.summary_line("cpu", partial)


def test_sizes_are_quick_or_full_and_settable_one_by_one():
    assert bench_gpu.options([])[1] == FULL and FULL.runs is None
    args, sizes = bench_gpu.options(["--device", "cpu", "--quick", "--steps", "2", "--spec-tokens", "8"])
    assert args.device == "cpu" and sizes == replace(QUICK, steps=2, spec_tokens=8)


def test_sections_take_the_records_they_should():
    records = [record("a"), record("b", finished=False), record("c"), record("a"), record("d", output=()),
               record("e", scenario="rl", source="humaneval"), record("f" * 1001)]
    splits = ["train", "train", "test", "test", "train", "test", "train"]
    training = bench_gpu.training_runs(records, splits, 9)  # finished training runs with an answer
    assert sorted(r["prompt"] for r in training) == ["a", "f" * 1001]
    assert bench_gpu.training_runs(records, splits, 1) == training[:1]
    assert bench_gpu.held_out(records, splits, 2) == [[ord("c"), 1], [ord("a"), 1]]  # distinct, file order
    assert len(bench_gpu.held_out(records, splits, 9)) == 3
    chat = bench_gpu.chat_prompts(records, 9)  # distinct ShareGPT chat prompts of at most 1,000 characters
    assert sorted(chat) == [[ord(c), 1] for c in "abcd"]
    assert bench_gpu.chat_prompts(records, 2) == bench_gpu.chat_prompts(records, 2)


def test_a_budget_stops_only_once_spent():
    Budget(60).check()
    spent = Budget(0.01)
    time.sleep(0.02)
    with pytest.raises(OverBudget):
        spent.check()


def test_a_failing_section_is_a_row_and_the_others_still_run(monkeypatch, capsys):
    def broken(check, budget):
        raise RuntimeError("no GPU memory")

    def fine(name):
        return lambda check, budget: {**RESULTS[name], "details": f"{name} ran"}

    monkeypatch.setattr(bench_gpu, "SECTIONS", {"collection": fine("collection"), "import": broken,
                                                 "drafter": fine("drafter"), "speculative": fine("speculative")})
    results, failed = bench_gpu.run_sections(None, "a GPU")
    assert sorted(results) == ["collection", "drafter", "speculative"]
    assert failed == {"import": "RuntimeError: no GPU memory"}
    out = capsys.readouterr().out
    assert "| import | a GPU | FAILED | RuntimeError: no GPU memory |" in out
    assert "| drafter | a GPU | 3.21 steps/s | drafter ran |" in out
