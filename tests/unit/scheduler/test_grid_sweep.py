"""Simulation grids: every point once, in table order, memoised, and equal to the serial loop of simulations."""

from __future__ import annotations

import pandas as pd
import pytest

from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.scheduler.grid_sweep import SweepGrid, grid_outcomes, grid_table
from lenscope.jobs.scheduler.replay import PredictorSpec, run_simulation
from tests.unit.scheduler.test_theory import ONE_SERVER

TRACE = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": [1] * 60,
                      "output_tokens": [20 + (37 * k) % 200 for k in range(60)]})
GRID = SweepGrid(qps=(2.0, 6.0), policies=(("rr", "fcfs"), ("rr", "sjf")),
                 predictors=(PredictorSpec(), PredictorSpec(kind="oracle-noise")), maes=(10.0, 80.0), seeds=(0, 1))


def test_a_grid_is_the_serial_loop_of_its_points(store):
    table = grid_table(GRID, grid_outcomes(store, TRACE, ONE_SERVER, GRID))
    assert len(table) == 2 * 2 * (1 + 2) * 2  # seeds x QPS x (oracle + 2 noise levels) x policies
    assert set(table["predictor"]) == {"oracle", "oracle+noise (MAE 10)", "oracle+noise (MAE 80)"}
    assert len(store.results_frame("scheduler_sim")) == len(table)  # every point stored once
    for row in table.sample(n=6, random_state=0).itertuples():
        dispatch, queue = row.policy.lower().split("+")
        mae = float(row.predictor.split("MAE ")[1].rstrip(")")) if "MAE" in row.predictor else 0.0
        spec = PredictorSpec("oracle-noise", mae=mae, seed=row.seed) if mae else PredictorSpec(seed=row.seed)
        serial = run_simulation(store, poisson_retime(TRACE, row.qps, row.seed), spec,
                                ONE_SERVER.with_(dispatch=dispatch, queue=queue), use_cache=False)
        assert serial.summary["all_e2e_p99_s"] == row.all_e2e_p99_s
        assert serial.summary["mean_jct_s"] == row.mean_jct_s
    seen = []
    again = grid_table(GRID, grid_outcomes(store, TRACE, ONE_SERVER, GRID,
                                           on_progress=lambda done, total, label: seen.append(done)))
    pd.testing.assert_frame_equal(again, table)
    assert seen == [len(table)]  # every point was stored: nothing simulated again


def test_empty_or_bad_axes_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        SweepGrid(qps=(), policies=(("rr", "fcfs"),))
    with pytest.raises(ValueError, match="positive"):
        SweepGrid(qps=(0.0,), policies=(("rr", "fcfs"),))


def test_simulate_sweep_command_prints_and_writes_the_table(data_dir, tmp_path, capsys):
    from lenscope.cli import main

    path = tmp_path / "trace.csv"
    TRACE.rename(columns={"arrival_s": "arrival"}).to_csv(path, index=False)
    out = tmp_path / "sweep.csv"
    assert main(["simulate", "--trace", str(path), "--sweep", "--sweep-qps", "2,6", "--policies", "rr+fcfs,rr+sjf",
                 "--predictors", "oracle,oracle-noise", "--maes", "10,80", "--seeds", "0,1", "--out", str(out)]) == 0
    assert "24 points (0 from the store)" in capsys.readouterr().out
    assert len(pd.read_csv(out)) == 24
    assert main(["simulate", "--trace", str(path), "--sweep"]) == 2  # no loads given: one clear message
    assert "--sweep-qps" in capsys.readouterr().err
