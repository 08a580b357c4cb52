"""Progress labels: a phase plus live details; the CLI's bars follow the phase."""

from analysis.core.progress import label_phase
from lenscope.cli._common import PhaseBars


def test_label_phase_drops_live_details():
    assert label_phase("step 1/9: collect chat 120 · 24 tok/s") == "step 1/9: collect chat 120"
    assert label_phase("cached runs") == "cached runs"


def test_phase_bars_keep_one_bar_while_details_change():
    bars = PhaseBars()
    bars(13, 138, "step 1/9: collect · 24 tok/s")
    first = bars.bar
    bars(20, 138, "step 1/9: collect · 31 tok/s")
    assert bars.bar is first and bars.bar.n == 20 and bars.bar.initial == 13
    assert "31 tok/s" in bars.bar.desc
    bars(0, 5, "step 2/9: heads")
    assert bars.bar is not first and bars.bar.total == 5
    bars.close()
