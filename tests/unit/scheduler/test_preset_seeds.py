"""The OUTLETS preset over seeds (each a new pool, draw and arrivals) with Student-t intervals, beside the oracle
and a constant predictor, its workloads, and the sweep and preset CLIs."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lenscope.analysis.scheduler.engine import SimConfig
from lenscope.analysis.scheduler.metrics import t_interval
from lenscope.analysis.scheduler.traces import draw_requests
from lenscope.jobs.scheduler.replay import (
    PRESET_SEEDS,
    SHIPPED_TRACES,
    PredictorSpec,
    format_seed_table,
    outlets_preset,
    outlets_trace,
    preset_seed_table,
    reference_rows,
)

CONV = SHIPPED_TRACES / "AzureLLMInferenceTrace_conv.csv"


def lengths_trace(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.arange(n) * 0.01, "prompt_tokens": rng.integers(5, 120, n),
                         "output_tokens": rng.integers(10, 900, n)})


def test_decode_bound_shape_keeps_short_prompts_and_long_outputs():
    shaped, note = outlets_trace(lengths_trace(), qps=50.0, n_requests=100, min_output_tokens=300)
    assert len(shaped) == 100
    assert shaped["prompt_tokens"].max() <= 50 and shaped["output_tokens"].min() >= 300
    assert "outputs >= 300 tokens" in note and "mean output" in note
    with pytest.raises(ValueError, match="lower the minimum output"):
        outlets_trace(lengths_trace(), min_output_tokens=5000)


def test_preset_over_seeds_runs_the_references_on_the_same_requests_and_pairs_changes_by_seed(store):
    trace, spec = lengths_trace(), PredictorSpec(kind="oracle-noise", mae=30.0)
    single = outlets_preset(store, trace, spec, n_requests=150, min_output_tokens=200, seeds=1, constant=333)
    seeded = outlets_preset(store, trace, spec, n_requests=150, min_output_tokens=200, seeds=3, constant=333)
    assert [o.summary for o in seeded.outcomes] == [o.summary for o in single.outcomes]  # seed 0 of the chosen one
    assert seeded.note.startswith(single.note) and "seeds 0-2, each a new pool" in seeded.note
    per_seed = seeded.per_seed
    predictors = ("oracle+noise (MAE 30)", "oracle", "constant 333")
    assert per_seed[["seed", "predictor", "policy"]].values.tolist() == [
        [s, p, q] for s in range(3) for p in predictors for q in ("RR+FCFS", "RR+SJF", "LB+SJF")]
    assert per_seed["short_e2e_p99_s"].nunique() > 3  # seeds differ
    baseline = per_seed[(per_seed["predictor"] == "oracle") & (per_seed["policy"] == "RR+FCFS")]
    lb = per_seed[(per_seed["predictor"] == predictors[0]) & (per_seed["policy"] == "LB+SJF")].set_index("seed")
    fcfs = per_seed[(per_seed["predictor"] == predictors[0]) & (per_seed["policy"] == "RR+FCFS")].set_index("seed")
    assert fcfs["short_e2e_p99_s"].tolist() == baseline["short_e2e_p99_s"].tolist()  # same requests and arrivals
    assert lb["short_p99_change"].tolist() == pytest.approx((lb["short_e2e_p99_s"] / fcfs["short_e2e_p99_s"]
                                                             - 1).tolist())
    assert seeded.changes["LB+SJF"] == pytest.approx(lb["short_p99_change"].mean())
    table = preset_seed_table(per_seed).set_index(["predictor", "policy"])
    assert table["seeds"].eq(3).all()
    assert table.loc[(predictors[0], "LB+SJF"), "short_p99_change"] == pytest.approx(lb["short_p99_change"].mean())
    oracle_lb = per_seed[(per_seed["predictor"] == "oracle") & (per_seed["policy"] == "LB+SJF")]
    share = lb["short_p99_change"].to_numpy() / oracle_lb["short_p99_change"].to_numpy()
    assert table.loc[(predictors[0], "LB+SJF"), "oracle_share"] == pytest.approx(share.mean())
    assert table.loc[("oracle", "LB+SJF"), "oracle_share"] == pytest.approx(1.0)
    assert np.isnan(table.loc[("oracle", "RR+FCFS"), "oracle_share"])
    assert (table["short_e2e_p99_s_lo"] <= table["short_e2e_p99_s"]).all()
    assert (table["short_e2e_p99_s"] <= table["short_e2e_p99_s_hi"]).all()
    refs = reference_rows(format_seed_table(preset_seed_table(per_seed)))
    assert refs[["predictor", "policy"]].values.tolist() == [[p, q] for p in predictors for q in ("RR+SJF", "LB+SJF")]


def test_preset_defaults_to_at_least_20_seeds(store, capsys):
    from lenscope.cli import main
    from lenscope.jobs.study.results import preset_config

    assert PRESET_SEEDS >= 20
    assert inspect.signature(outlets_preset).parameters["seeds"].default == PRESET_SEEDS
    assert preset_config(store, "study")["seeds"] == PRESET_SEEDS  # the study's preset step
    assert main(["outlets-preset", "--trace", str(CONV), "--requests", "30", "--qps", "50"]) == 0
    out = capsys.readouterr().out
    assert f"seeds 0-{PRESET_SEEDS - 1}" in out and f"n = {PRESET_SEEDS} seeds" in out


def test_each_seed_draws_a_new_pool_of_requests():
    pool = lengths_trace(300).assign(rid=range(300))
    drawn = [draw_requests(pool, 100, seed) for seed in range(3)]
    assert all(len(d) == 100 and d["rid"].isin(pool["rid"]).all() for d in drawn)
    assert len({frozenset(d["rid"]) for d in drawn}) == 3  # not the first 100 every time
    shaped = [outlets_trace(pool, qps=50.0, seed=seed, n_requests=50)[0] for seed in range(2)]
    assert set(shaped[0]["rid"]) != set(shaped[1]["rid"])
    small = pool.head(10)  # fewer than requested: a bootstrap resample first, so not every run is in every draw
    assert len({frozenset(draw_requests(small, 12, seed)["rid"]) for seed in range(6)}) > 1


def test_decode_bound_workload_draws_in_proportion_to_output_length():
    pool = pd.DataFrame({"prompt_tokens": 10, "output_tokens": [100] * 50 + [900] * 50, "arrival_s": 0.0})
    uniform = [draw_requests(pool, 4000, seed)["output_tokens"].mean() for seed in range(5)]
    bound = [draw_requests(pool, 4000, seed, "decode-bound")["output_tokens"].mean() for seed in range(5)]
    assert np.mean(uniform) == pytest.approx(500, rel=0.1)
    assert np.mean(bound) == pytest.approx((100**2 + 900**2) / 1000, rel=0.1)  # E[L^2] / E[L] = 820
    shaped, note = outlets_trace(pool.assign(censored=pool["output_tokens"] == 900), 10.0, n_requests=300,
                                 workload="decode-bound")
    assert "drawn in proportion to their output length" in note and "mean output" in note
    assert "cut at the token cap, i.e. at least 900 tokens" in note
    with pytest.raises(ValueError, match="workload must be one of uniform, decode-bound"):
        draw_requests(pool, 10, workload="longest")


def test_the_oracle_cuts_the_short_p99_at_least_as_much_as_the_constant(store):
    """Short answers of 20 tokens queue behind 2,000-token ones: SJF with the true lengths serves them first, with a
    constant it has nothing to order by."""
    rng = np.random.default_rng(0)
    trace = pd.DataFrame({"arrival_s": 0.0, "prompt_tokens": 10,
                          "output_tokens": np.where(rng.random(400) < 0.8, 20, 2000)})
    preset = outlets_preset(store, trace, PredictorSpec(kind="oracle"), SimConfig(max_batch_size=8), n_requests=300,
                            seeds=3, constant=20)
    p99 = preset.per_seed.pivot_table(index=["seed", "policy"], columns="predictor", values="short_e2e_p99_s")
    for policy in ("RR+SJF", "LB+SJF"):
        rows = p99.xs(policy, level="policy")
        assert (rows["oracle"] <= rows["constant 20"]).all()
    assert preset.changes["RR+SJF"] < -0.2


def test_t_interval_is_scipys():
    values = np.array([-0.12, -0.08, -0.15, -0.11, -0.09, -0.13])
    est = t_interval(values)
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    assert (est.value, est.lo, est.hi, est.n) == pytest.approx((values.mean(), lo, hi, 6))
    assert t_interval(values, level=0.9).hi < hi
    one = t_interval([0.3])
    assert one.value == 0.3 and np.isnan(one.lo) and np.isnan(t_interval([]).value)


def test_seed_table_means_and_text():
    per_seed = pd.DataFrame({"seed": list(range(5)) * 2, "predictor": ["X"] * 5 + ["oracle"] * 5,
                             "policy": "RR+SJF", "short_e2e_p99_s": [1.0, 2.0, 3.0, 4.0, 5.0] * 2,
                             "all_e2e_p99_s": 2.0, "mean_jct_s": 1.0, "short_p99_change": [-0.1] * 5 + [-0.2] * 5})
    per_seed = pd.concat([per_seed.assign(policy="RR+FCFS", short_p99_change=0.0), per_seed], ignore_index=True)
    table = preset_seed_table(per_seed).set_index(["predictor", "policy"])
    row = table.loc[("X", "RR+SJF")]
    assert row["short_e2e_p99_s"] == 3.0 and row["seeds"] == 5 and row["oracle_share"] == pytest.approx(0.5)
    half = stats.t.ppf(0.975, 4) * np.std([1, 2, 3, 4, 5], ddof=1) / np.sqrt(5)
    assert (row["short_e2e_p99_s_lo"], row["short_e2e_p99_s_hi"]) == pytest.approx((3 - half, 3 + half))
    text = format_seed_table(preset_seed_table(per_seed)).set_index(["predictor", "policy"])
    assert text.loc[("X", "RR+SJF"), "short P99 vs RR+FCFS (%)"] == "-10.0 [-10.0, -10.0]"
    assert text.loc[("X", "RR+SJF"), "share of the oracle's cut (%)"] == "50 [50, 50]"
    assert text.loc[("X", "RR+FCFS"), "share of the oracle's cut (%)"] == ""
    assert text.loc[("X", "RR+SJF"), "all P99 (s)"] == "2.00 [2.00, 2.00]"


def test_cli_sweep_preset_and_new_simulate_options(data_dir, capsys):
    from lenscope.cli import main

    assert main(["qps-sweep", "--trace", str(CONV), "--first-n", "300", "--policies", "rr+fcfs,lb+sjf",
                 "--qps-values", "2,400"]) == 0
    text = capsys.readouterr().out
    assert "LB+SJF: saturates at 400 QPS" in text and "RR+FCFS: saturates at 400 QPS" in text
    assert main(["outlets-preset", "--trace", str(CONV), "--requests", "200", "--seeds", "2", "--predictor",
                 "oracle-noise"]) == 0
    lines = capsys.readouterr().out.splitlines()
    text = "\n".join(lines)
    assert "outputs >= 100 tokens" in text and "seeds 0-1" in text and "uniform workload" in text
    assert "references on the same requests and arrivals: oracle (the true lengths) and constant 129 (the median " \
           "output length of the trace)" in text
    for predictor in ("oracle+noise (MAE 50)", "oracle", "constant 129"):
        assert any(re.match(rf"\s*{re.escape(predictor)}\s+LB\+SJF\s+2\s", line) for line in lines), predictor
    assert lines[-1] == ("means over seeds [95% Student-t interval over n = 2 seeds]; changes and shares of the "
                         "oracle's cut paired by seed")
    assert main(["simulate", "--trace", str(CONV), "--first-n", "200", "--queue", "srpt", "--prefill-queue", "spf",
                 "--preemptive", "--preempt-limit", "0.5", "--max-preemptions", "2"]) == 0
    assert "RR+SRPT 1P+3D continuous prefill SPF preemptive (c=0.5, max 2)" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(CONV), "--first-n", "200", "--mode", "colocated",
                 "--chunk-tokens", "512"]) == 0
    assert "RR+FCFS 3x colo continuous chunked 512" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(CONV), "--prefix-cache-tokens", "4096"]) == 2  # no hash_ids
