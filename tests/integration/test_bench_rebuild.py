"""The rebuild benchmark on the real model: a small sample of the shipped study rebuilt phase by phase into an
empty store."""

from __future__ import annotations

import pytest

from lenscope.benchmarks.bench_rebuild import rebuild


@pytest.mark.model
def test_a_small_sample_rebuilds_phase_by_phase(target, data_dir):
    with pytest.raises(ValueError, match="no phase nope"):
        rebuild(target, {"nope"}, 0.001)
    rows = rebuild(target, {"import", "heads"}, 0.001)
    assert [r[0] for r in rows] == ["import", "heads"]
    assert rows[0][1] == "done" and rows[0][3]["import"] > 0
    assert rows[1][1] == "done" or rows[1][1].startswith("not run:")
    again = rebuild(target, {"import"}, 0.001)  # the sample's runs are stored: imported again, nothing new
    assert again[0][1] == "done"
