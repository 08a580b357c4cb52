"""``lenscope study``: one resumable pipeline from collection to claims, on a test-sized study."""

from __future__ import annotations

import lenscope.jobs.study as study_jobs
from lenscope.cli import main
from lenscope.jobs.collect import CollectReport
from lenscope.jobs.study import CLAIMS_KIND, SIZES, run_study, study_steps


def test_tiny_study_runs_every_step_then_skips_what_is_stored(store, target, monkeypatch, capsys):
    labels = []
    report = run_study(store, target, "tiny", "tiny", on_progress=lambda d, n, label: labels.append(label))
    names = [name for name, _ in report]
    assert names == [s.name for s in study_steps(store, target, "tiny", "tiny")]
    # the collections, then EGTP, PLP, attribution, probe, three drafters, baselines and claims
    assert len(names) == len(SIZES["tiny"]) + 9
    statuses = dict(report)
    assert all(statuses[n] == "done" for n in names[:len(SIZES["tiny"])])
    assert statuses["claims"] == "done" and store.get_result(CLAIMS_KIND, {"dataset": "tiny"}) is not None
    assert all(s == "done" or s.startswith("not run: ") for s in statuses.values())
    assert any(label.startswith(f"step 1/{len(names)}: collect chat") for label in labels)
    assert len(store.runs_frame("tiny")) == 10 + 2 + 4  # rl samples each prompt 4 times

    collected = []
    real = study_jobs.collect_dataset

    def spy(*args, **kwargs) -> CollectReport:
        out = real(*args, **kwargs)
        collected.append(out.generated)
        return out

    monkeypatch.setattr("lenscope.jobs.study.collect_dataset", spy)
    again = dict(run_study(store, target, "tiny", "tiny"))
    assert collected == [0, 0, 0]  # every generation came from the store
    trained = [n for n in names[len(SIZES["tiny"]):-1] if statuses[n] == "done"]
    assert all(again[n] == "skipped" for n in trained)

    monkeypatch.setattr("lenscope.cli.study.load_target", lambda args: target)
    assert main(["study", "--size", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "| claim | paper |" in out and "collect chat" in out
