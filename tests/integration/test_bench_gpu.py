"""The GPU check (``python -m lenscope benchmark gpu``) end to end on the CPU at its smallest sizes: every section
measures something, each prints its row, the JSON holds the figures and the last line sums them up."""

from __future__ import annotations

import json

import pytest

from lenscope.benchmarks import bench_gpu

SMALLEST = ["--device", "cpu", "--quick", "--prompts", "2", "--new-tokens", "8", "--batch", "2", "--runs", "2",
            "--steps", "2", "--spec-prompts", "1", "--spec-tokens", "8"]


@pytest.mark.model
def test_every_section_measures_on_the_cpu(tmp_path, capsys):
    bench_gpu.main([*SMALLEST, "--out", str(tmp_path / "gpu.json")])
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads((tmp_path / "gpu.json").read_text())
    sections, device = result["sections"], result["device_name"]
    assert result["failed"] == {} and result["device"] == "cpu" and sorted(sections) == sorted(bench_gpu.SECTIONS)
    collection = sections["collection"]
    assert collection["prompts"] == 2 and 0 < collection["engine_tokens"] <= 16 and 0 < collection["hf_tokens"] <= 16
    assert collection["engine_tokens_per_s"] > 0 and collection["vs_hf"] > 0
    assert sections["import"]["runs"] == 2 and sections["import"]["tokens_per_s"] > 0
    assert not sections["import"]["stopped_at_budget"]
    drafter = sections["drafter"]
    assert (drafter["steps"], drafter["runs"], drafter["ttt_steps"]) == (2, 2, 3) and drafter["steps_per_s"] > 0
    speculative = sections["speculative"]
    assert speculative["prompts"] == speculative["identical"] == 1  # greedy: the target's own answer
    assert speculative["speedup"] > 0 and 1 <= speculative["tau"] <= 1 + bench_gpu.DRAFT_STEPS
    assert len(speculative["acceptance"]) == bench_gpu.DRAFT_STEPS
    for name in bench_gpu.SECTIONS:
        assert any(line.startswith(f"| {name} | {device} | ") for line in lines)
    assert lines[-1] == result["summary"] == bench_gpu.summary_line(device, sections)
    assert lines[-1].startswith(f"gpu check on {device}: collection ") and "failed" not in lines[-1]
