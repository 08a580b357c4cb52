"""The rebuild benchmark's accounting: time charged to what each phase said it was doing, the table, the last line."""

from __future__ import annotations

import time

import pytest

from lenscope.analysis.core.progress import with_details
from lenscope.benchmarks import bench_rebuild
from lenscope.benchmarks.bench_rebuild import PhaseClock, _activity, report


def test_activity_drops_the_step_counts_and_details():
    assert _activity(with_details("training", "loss 0.512")) == "training"
    assert _activity("EGTP head (max pooling): fold 2/5, seed 1/3") == "EGTP head (max pooling)"
    assert _activity("pooled features (layer 30)") == "pooled features (layer 30)"
    assert _activity("") == "other"


def test_phase_clock_charges_the_time_to_the_earlier_label():
    forwarded = []
    clock = PhaseClock(lambda d, n, label: forwarded.append(label))
    clock(0, 2, "loading")
    time.sleep(0.05)
    clock(1, 2, with_details("training", "loss 1"))
    time.sleep(0.01)
    spent = clock.close()
    assert spent["loading"] >= 0.05 > spent["training"]
    assert forwarded == ["loading", with_details("training", "loss 1")]
    assert set(spent) == {"starting", "loading", "training"}


def test_report_ends_with_the_total_in_minutes():
    rows = [("import", "done", 90.0, {"import": 89.0}), ("heads", "not run: too few runs", 30.0, {})]
    text = report(rows, "5% sample")
    assert "| import | done | 1.5 | 75% |" in text
    assert "  import: import 1.5 min" in text
    assert text.splitlines()[-1] == "study rebuilt (5% sample) in 2.0 min"


def test_unknown_sample_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench_rebuild.main(["--sample", "0"])
    assert "--sample must be in (0, 1]" in capsys.readouterr().err
