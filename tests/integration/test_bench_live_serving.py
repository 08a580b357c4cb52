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
    assert out.count("- FCFS minus SJF on oracle: real ") == 2  # the paired difference at each load
    assert re.search(r"the real server against itself \(FCFS served again\): P99 E2E \d+\.\d\d s then", out)
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"live serving: worst P99 E2E error \d+\.\d% \(goal 10%; \d+\.\d% at each run's measured "
                        r"speed\), policy ranking the same at [012] of 2 loads, pairs the real runs tell apart "
                        r"ordered alike [012] of [012], real P99 \d+\.\d% apart run to run, 5 real runs in "
                        r"\d+\.\d min", last), last
