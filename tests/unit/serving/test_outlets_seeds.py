"""The OUTLETS preset on a decode-bound workload over seeds with CIs, and the sweep and preset CLIs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenscope.jobs.serving import (
    SHIPPED_TRACES,
    PredictorSpec,
    format_seed_table,
    outlets_preset,
    outlets_trace,
    preset_seed_table,
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


def test_preset_over_seeds_pairs_changes_by_seed_and_keeps_the_first_seed_as_the_single_run(store):
    trace, spec = lengths_trace(), PredictorSpec(kind="oracle-noise", mae=30.0)
    single = outlets_preset(store, trace, spec, n_requests=150, min_output_tokens=200)
    seeded = outlets_preset(store, trace, spec, n_requests=150, min_output_tokens=200, seeds=3)
    assert [o.summary for o in seeded.outcomes] == [o.summary for o in single.outcomes]
    assert seeded.changes == single.changes and seeded.note.endswith("seeds 0-2")
    per_seed = seeded.per_seed
    assert per_seed[["seed", "policy"]].values.tolist() == [[s, p] for s in range(3)
                                                            for p in ("RR+FCFS", "RR+SJF", "LB+SJF")]
    assert (per_seed["short_e2e_p99_s"].groupby(per_seed["seed"]).nunique() > 1).all()
    baseline = per_seed[per_seed["policy"] == "RR+FCFS"].set_index("seed")["short_e2e_p99_s"]
    lb = per_seed[per_seed["policy"] == "LB+SJF"].set_index("seed")
    assert lb["short_p99_change"].tolist() == pytest.approx((lb["short_e2e_p99_s"] / baseline - 1).tolist())
    assert per_seed["short_e2e_p99_s"].nunique() > 3  # seeds differ
    table = preset_seed_table(per_seed).set_index("policy")
    assert table.loc["LB+SJF", "short_p99_change"] == pytest.approx(lb["short_p99_change"].mean())
    assert (table["short_e2e_p99_s_lo"] <= table["short_e2e_p99_s"]).all()
    assert (table["short_e2e_p99_s"] <= table["short_e2e_p99_s_hi"]).all()


def test_seed_table_means_and_text():
    per_seed = pd.DataFrame({"seed": range(5), "policy": "X", "short_e2e_p99_s": [1.0, 2.0, 3.0, 4.0, 5.0],
                             "all_e2e_p99_s": 2.0, "mean_jct_s": 1.0, "short_p99_change": -0.1})
    table = preset_seed_table(per_seed)
    assert table.loc[0, "short_e2e_p99_s"] == 3.0 and table.loc[0, "seeds"] == 5
    assert 1.0 <= table.loc[0, "short_e2e_p99_s_lo"] < 3.0 < table.loc[0, "short_e2e_p99_s_hi"] <= 5.0
    text = format_seed_table(table).iloc[0]
    assert text["short P99 vs RR+FCFS (%)"] == "-10.0 [-10.0, -10.0]" and text["all P99 (s)"] == "2.00 [2.00, 2.00]"


def test_cli_sweep_preset_and_new_simulate_options(data_dir, capsys):
    from lenscope.cli import main

    assert main(["qps-sweep", "--trace", str(CONV), "--first-n", "300", "--policies", "rr+fcfs,lb+sjf",
                 "--qps-values", "2,400"]) == 0
    text = capsys.readouterr().out
    assert "LB+SJF: saturates at 400 QPS" in text and "RR+FCFS: saturates at 400 QPS" in text
    assert main(["outlets-preset", "--trace", str(CONV), "--requests", "200", "--seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "outputs >= 100 tokens" in text and "seeds 0-1" in text and "LB+SJF      2" in text
    assert main(["simulate", "--trace", str(CONV), "--first-n", "200", "--queue", "srpt", "--prefill-queue", "spf",
                 "--preemptive", "--preempt-limit", "0.5", "--max-preemptions", "2"]) == 0
    assert "RR+SRPT 1P+3D continuous prefill SPF preemptive (c=0.5, max 2)" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(CONV), "--first-n", "200", "--mode", "colocated",
                 "--chunk-tokens", "512"]) == 0
    assert "RR+FCFS 3x colo continuous chunked 512" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(CONV), "--prefix-cache-tokens", "4096"]) == 2  # no hash_ids
