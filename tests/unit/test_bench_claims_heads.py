"""The claims-heads benchmark: both ways of training the cross-validation's heads, timed, checked bit for bit."""

from __future__ import annotations

from dataclasses import replace

from lenscope.analysis.egtp.training import HeadConfig
from lenscope.benchmarks import bench_claims_heads
from lenscope.benchmarks.bench_claims_heads import _tasks, compare, main


def test_the_benchmark_prints_both_learners_and_its_last_line(capsys):
    main(["--epochs", "1", "--plp-rows", "200", "--plp-epochs", "1"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2].startswith("| EGTP head (1,400 rows, 15 side by side) | 1 |") and lines[2].endswith("| yes |")
    assert lines[3].startswith("| PLP (200 rows, 3 side by side) | 1 |") and lines[3].endswith("| yes |")
    assert lines[-1].startswith("claims heads: 15 EGTP heads side by side in ")
    assert lines[-1].endswith(", bit for bit the same")


def test_the_check_tells_different_heads_apart(monkeypatch):
    tasks = _tasks(40, 10, 8, HeadConfig(hidden=4, epochs=1))
    assert compare(tasks[:3], 3)[2]
    real = bench_claims_heads.train_heads

    def reseeded(chosen):  # side by side with other seeds: not the same heads
        return real([replace(t, config=replace(t.config, seed=t.config.seed + 1)) for t in chosen]) \
            if len(chosen) > 1 else real(chosen)

    monkeypatch.setattr(bench_claims_heads, "train_heads", reseeded)
    assert not compare(tasks[:3], 3)[2]
