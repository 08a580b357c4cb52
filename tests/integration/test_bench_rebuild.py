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


@pytest.mark.model
def test_the_floor_counts_the_shipped_study_as_it_is_rebuilt(target):
    from lenscope.benchmarks.bench_rebuild_floor import study_work

    work = {w.phase: w for w in study_work(target)}
    assert list(work) == ["import", "baselines: PiA", "drafter:outlets", "drafter:no-decoder", "drafter:lp-only",
                          "drafter:sd-only"]
    assert work["import"].tokens == 1_201_973  # censored runs cut after 33 answer tokens, as the study imports them
    assert work["baselines: PiA"].tokens > 500_000  # each distinct prompt once, inside the question
    # the variants read the same training runs; the one without a decoder layer multiplies far less
    assert work["drafter:outlets"].tokens == work["drafter:no-decoder"].tokens
    assert work["drafter:no-decoder"].flops < work["drafter:outlets"].flops / 2
