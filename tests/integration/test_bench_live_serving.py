"""The live-serving benchmark on the real model, quick: real runs at two loads, the simulator's replays, the table
and the last line."""

from __future__ import annotations

import re

import pytest

from lenscope.benchmarks.bench_live_serving import main


@pytest.mark.model
def test_quick_live_serving_compares_real_and_simulated_runs(capsys):
    main(["--quick"])
    out = capsys.readouterr().out
    assert "## light load" in out and "## heavy load" in out
    assert out.count("| FCFS |") == 2 and out.count("| SJF on oracle |") == 2
    assert "ranking by mean E2E, sim:" in out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"live serving: worst P99 E2E error \d+\.\d% \(goal 10%\), policy ranking the same at [012] "
                        r"of 2 loads, 4 real runs in \d+\.\d min", last), last
