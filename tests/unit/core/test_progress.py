"""Progress labels: a phase plus live details; bars, rates and ETAs follow the phase."""

from lenscope.analysis.core.progress import PhaseClock, label_phase, with_details
from lenscope.cli._common import PhaseBars


def test_label_phase_drops_live_details_only():
    label = with_details("step 1/9: collect chat 120 · sampling", "24 tok/s")
    assert label == "step 1/9: collect chat 120 · sampling | 24 tok/s"
    assert label_phase(label) == "step 1/9: collect chat 120 · sampling"
    assert label_phase("step 4/11: evidence · training the head") == "step 4/11: evidence · training the head"


def test_phase_bars_keep_one_bar_while_details_change_and_a_new_one_per_phase():
    bars = PhaseBars()
    bars(13, 138, "step 1/9: collect · sampling | 24 tok/s")
    first = bars.bar
    bars(20, 138, "step 1/9: collect · sampling | 31 tok/s")
    assert bars.bar is first and bars.bar.n == 20 and bars.bar.initial == 13
    assert "31 tok/s" in bars.bar.desc
    bars(1, 60, "step 1/9: collect · training")  # a sub-phase counts in other units: its own bar
    assert bars.bar is not first and bars.bar.total == 60
    bars.close()


def test_phase_clock_measures_each_phase_from_its_first_report(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("lenscope.analysis.core.progress.time.monotonic", lambda: now[0])
    clock = PhaseClock()
    clock.update(10, "load · runs")
    assert clock.eta(10, 100) is None  # nothing measured yet
    now[0] += 10
    clock.update(30, "load · runs | 5 MB/s")  # details only: same phase
    assert clock.rate(30) == 2.0 and clock.eta(30, 100) == 35.0 and clock.eta(100, 100) is None
    clock.update(1, "train")
    now[0] += 4
    assert clock.rate(3) == 0.5 and clock.eta(3, 5) == 4.0
