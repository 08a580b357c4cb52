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
    assert len(re.findall(r"^\| FCFS \| [12] \|", out, re.M)) == 4  # served twice at each load
    assert "ranking by mean E2E, sim:" in out
    assert out.count("- FCFS minus SJF on oracle: real ") == 2  # the paired difference at each load
    assert re.search(r"\| heavy \| SJF on oracle \| 2 \| \d+\.\d\d / \d+\.\d\d \| [+-]\d+\.\d% \[[+-]\d+\.\d%, "
                     r"[+-]\d+\.\d%\] \|", out)  # the P99 error over its two runs, with a CI
    assert out.count("TTFT P99 error, mean over the runs: sim at the speed measured before the run ") == 2
    assert re.search(r"\| FCFS \| 2 \|.* \| [+-]\d+\.\d% / [+-]\d+\.\d% \|$", out, re.M)  # errors over time
    assert re.search(r"the real server against itself: a policy's P99 E2E \d+\.\d% apart", out)
    last = out.strip().splitlines()[-1]
    ci = r"[+-]\d+\.\d% \[[+-]\d+\.\d%, [+-]\d+\.\d%\] \((within the goal|beyond the goal|cannot tell)\)"
    assert re.fullmatch(r"live serving: P99 E2E error within 10% for [0-4] of 4 policy-loads, beyond for [0-4], "
                        r"cannot tell for [0-4] \(at the machine's speed over time: [0-4], [0-4], [0-4]\); over all "
                        rf"runs {ci}, at each run's measured speed {ci}, at the machine's speed over time {ci}; policy "
                        r"ranking the same at [012] of 2 loads \([012] at each run's speed, [012] at the speed over "
                        r"time\), pairs the real runs tell apart ordered alike [012] of [012], real P99 \d+\.\d% apart "
                        r"run to run, 8 real runs in \d+\.\d min", last), last
