"""QPS sweep: the saturation criterion on hand-made cases and a one-server sweep whose capacity is known."""

from __future__ import annotations

import pandas as pd
import pytest

from lenscope.analysis.scheduler.metrics import backlog_growth, served_fraction
from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.scheduler.qps_sweep import parse_policies, parse_qps, qps_sweep, saturation_points, saturation_text
from lenscope.jobs.scheduler.replay import PredictorSpec
from tests.unit.scheduler.test_theory import ONE_SERVER


def test_backlog_growth_compares_what_the_last_and_second_quarters_of_arrivals_find():
    # arrivals at 0..7, request k finishes at 2k + 0.5 (served twice as slowly as they come): arrival k finds
    # 0, 0, 1, 1, 2, 2, 3, 3 others in the system; the second quarter (arrivals 2, 3) 1, the last (6, 7) 3
    requests = pd.DataFrame({"arrival_s": range(8), "finish_s": [2 * k + 0.5 for k in range(8)]})
    assert backlog_growth(requests) == pytest.approx(3.0)
    steady = pd.DataFrame({"arrival_s": range(8), "finish_s": [k + 0.5 for k in range(8)]})
    assert backlog_growth(steady) == 1.0  # nobody finds anyone
    with pytest.raises(ValueError, match="4 requests"):
        backlog_growth(requests.head(3))
    assert served_fraction(90.0, 100.0) == 0.9 and served_fraction(0.0, 0.0) == 1.0


def test_a_one_server_sweep_saturates_beyond_its_capacity(store):
    """Service takes 100 ms (101 tokens at 1 ms, the first one free): capacity 10 QPS. At 2 and 8 QPS the server keeps
    up (at 8 the backlog swings, its growth passes 1.25, but it serves what is offered); at 20 QPS (load 2) the
    backlog grows all run long and the offered rate is served only at capacity."""
    trace = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": [1] * 400, "output_tokens": [101] * 400})
    policies = parse_policies("rr+fcfs, RR+SJF")
    sweep = qps_sweep(store, trace, PredictorSpec(), ONE_SERVER, policies, [2.0, 8.0, 20.0])
    assert sweep["policy"].tolist() == ["RR+FCFS"] * 3 + ["RR+SJF"] * 3
    assert sweep["saturated"].tolist() == [False, False, True] * 2
    overloaded = sweep[sweep["qps"] == 20.0]
    assert (overloaded["backlog_growth"] > 2).all()  # the backlog at fraction f of the run grows like f
    window = poisson_retime(trace, 20.0, 0)["arrival_s"].max()  # the server works 400 x 100 ms, barely ever idle
    assert overloaded["served_fraction"].tolist() == pytest.approx([window / 40.0] * 2, rel=0.01)
    assert (sweep.loc[sweep["qps"] == 8.0, "backlog_growth"] > 1.25).any()
    points = saturation_points(sweep)
    assert points == {"RR+FCFS": 20.0, "RR+SJF": 20.0}
    assert saturation_text({"A": 20.0, "B": None}, [2.0, 20.0]) == ["A: saturates at 20 QPS", "B: keeps up to 20 QPS"]
    again = qps_sweep(store, trace, PredictorSpec(), ONE_SERVER, policies, [2.0, 8.0, 20.0])
    pd.testing.assert_frame_equal(again, sweep)
    assert len(store.results_frame("scheduler_sim")) == 6  # every point memoised once


def test_sweep_arguments_are_checked():
    with pytest.raises(ValueError, match="DISPATCH\\+QUEUE"):
        parse_policies("rr-fcfs")
    with pytest.raises(ValueError, match="positive"):
        parse_qps("0, 5")
    assert parse_qps("8, 2,2") == [2.0, 8.0]
