"""``lenscope study``: one resumable pipeline from collection to claims, on a test-sized study."""

from __future__ import annotations

import lenscope.jobs.study as study_jobs
from lenscope.cli import main
from lenscope.jobs.collect import CollectReport
from lenscope.jobs.report import study_report
from lenscope.jobs.study import (
    CLAIMS_KIND,
    SIZES,
    collection_text,
    run_study,
    study_checklist,
    study_layers,
    study_steps,
)
from lenscope.jobs.tour import tour


def test_tiny_study_runs_every_step_then_skips_what_is_stored(store, target, monkeypatch, capsys, tmp_path):
    labels = []
    report = run_study(store, target, "tiny", "tiny", on_progress=lambda d, n, label: labels.append(label))
    names = [name for name, _ in report]
    assert names == [s.name for s in study_steps(store, target, "tiny", "tiny")]
    assert [done for _, done in study_checklist(store, target, "other", "tiny")] == [False] * len(names)
    # one collection of every chunk, then EGTP, PLP, attribution, probe, the OUTLETS drafter, baselines, preset,
    # claims, and the drafter ablations (which the claims do not read: training them leaves the claims fresh)
    assert len(names) == 1 + 10 and names[0] == f"collect {collection_text(SIZES['tiny'])}"
    assert names[-3:] == ["claims", "drafter lp-only", "drafter sd-only"]
    statuses = dict(report)
    assert statuses[names[0]] == "done"
    assert statuses["claims"] == "done" and store.get_result(CLAIMS_KIND, {"dataset": "tiny"}) is not None
    assert all(s == "done" or s.startswith("not run: ") for s in statuses.values())
    assert any(label.startswith(f"step 1/{len(names)}: collect chat") for label in labels)
    assert len(store.runs_frame("tiny")) == 10 + 2 + 4  # rl samples each prompt 4 times

    collected = []
    real = study_jobs.collect_requests

    def spy(*args, **kwargs) -> CollectReport:
        out = real(*args, **kwargs)
        collected.append(out.generated)
        return out

    monkeypatch.setattr("lenscope.jobs.study.collect_requests", spy)
    again = dict(run_study(store, target, "tiny", "tiny"))
    assert collected == []  # every request is stored, so the collection did not run
    done = [n for n in names if statuses[n] == "done"]
    assert all(again[n] == "skipped" for n in done)  # the claims too: no predictor changed since
    assert dict(study_checklist(store, target, "tiny", "tiny")) == {n: n in done for n in names}

    html = study_report(store, "tiny", *study_layers(store, "tiny"))
    assert html.count("<h2>") == 6 and html.count("plotly.js v") == 1  # plotly.js embedded once
    assert "The papers&#x27; claims" in html and "EGTP pooling &lt; max pooling" in html
    stops = tour(store, "tiny", target.num_layers)
    assert [s.title.split(" · ")[1] for s in stops] == ["Entropy", "Pooling", "Remaining length", "Drafter",
                                                         "Scheduling"]
    assert all(s.value is None or "[" in s.value or s.value.endswith("%") for s in stops)

    monkeypatch.setattr("lenscope.cli.study.load_target", lambda args: target)
    assert main(["study", "--size", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "| claim | paper |" in out and "collect chat" in out and "skipped" in out
    assert main(["study", "--size", "tiny", "--train-only"]) == 0
    out = capsys.readouterr().out
    assert "collect chat" not in out and "claims: skipped" in out

    report_file = tmp_path / "report.html"
    assert main(["report", "--dataset", "tiny", "--out", str(report_file)]) == 0
    assert report_file.read_text().startswith("<!DOCTYPE html>") and "wrote" in capsys.readouterr().out
    assert main(["report", "--dataset", "nothing"]) == 2
    assert "no dataset 'nothing'" in capsys.readouterr().err
