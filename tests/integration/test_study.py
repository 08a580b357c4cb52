"""``lenscope study``: one resumable pipeline from collection to claims, on a test-sized study."""

from __future__ import annotations

import gzip
import json

import lenscope.jobs.study.pipeline as study_jobs
from lenscope.analysis.core.progress import no_progress
from lenscope.analysis.data.prompts import PromptItem
from lenscope.cli import main
from lenscope.jobs.results.claims import CLAIMS_KIND, stored_claims_table
from lenscope.jobs.runs.collect import CollectReport, collect_dataset
from lenscope.jobs.runs.datasets import dataset_counts
from lenscope.jobs.runs.generations import export_generations, read_generations, sample_prompts_of
from lenscope.jobs.study.pipeline import (
    SIZES,
    ShippedSample,
    collection_text,
    run_study,
    study_checklist,
    study_steps,
)
from lenscope.jobs.study.report import study_report
from lenscope.jobs.study.results import StoreResults
from lenscope.jobs.study.tour import tour
from lenscope.models.engine import GenerationSettings
from lenscope.store.store import Store


def test_tiny_study_runs_every_step_then_skips_what_is_stored(store, target, monkeypatch, capsys, tmp_path):
    labels = []
    report = run_study(store, target, "tiny", "tiny", on_progress=lambda d, n, label: labels.append(label))
    names = [name for name, _ in report]
    assert names == [s.name for s in study_steps(store, target, "tiny", "tiny")]
    assert [done for _, done in study_checklist(store, target, "other", "tiny")] == [False] * len(names)
    # one collection of every chunk, then EGTP, PLP, attribution, its evidence test, probe, the OUTLETS drafter,
    # baselines, preset, claims, and the drafter ablations (which the claims do not read: training them leaves the
    # claims fresh)
    assert len(names) == 1 + 13 and names[0] == f"collect {collection_text(SIZES['tiny'])}"
    claims = "claims (5-fold cross-validation, 1 training seed)"
    assert names[-5:] == [claims, "drafter no-decoder", "drafter lp-only", "drafter sd-only",
                          "drafter ablation (the variants beside probes that see what the drafter sees)"]
    statuses = dict(report)
    assert statuses[names[0]] == "done"
    assert statuses[claims] == "done" and store.get_result(CLAIMS_KIND, {"dataset": "tiny"}) is not None
    assert all(s == "done" or s.startswith("not run: ") for s in statuses.values())
    assert any(label.startswith(f"step 1/{len(names)}: collect chat") for label in labels)
    assert len(store.runs_frame("tiny")) == 10 + 2 + 4  # rl samples each prompt 4 times

    collected = []
    real = study_jobs.collect_requests

    def spy(*args, **kwargs) -> CollectReport:
        out = real(*args, **kwargs)
        collected.append(out.generated)
        return out

    monkeypatch.setattr("lenscope.jobs.study.pipeline.collect_requests", spy)
    again = dict(run_study(store, target, "tiny", "tiny"))
    assert collected == []  # every request is stored, so the collection did not run
    done = [n for n in names if statuses[n] == "done"]
    assert all(again[n] == "skipped" for n in done)  # the claims too: no predictor changed since
    assert dict(study_checklist(store, target, "tiny", "tiny")) == {n: n in done for n in names}

    html = study_report(StoreResults(store, "tiny"))
    assert html.count("<h2>") == 6 and html.count("plotly.js v") == 1  # plotly.js embedded once
    assert "The papers&#x27; claims" in html and "EGTP pooling &lt; max pooling" in html
    stops = tour(StoreResults(store, "tiny"))
    assert [s.title.split(" · ")[1] for s in stops] == ["Entropy", "Pooling", "Remaining length", "Drafter",
                                                         "Scheduling"]
    assert all(s.value is None or s.interval.startswith("95% ") for s in stops)  # each interval names its level
    assert all(s.value is None or s.rests_on for s in stops)  # and each card what it rests on
    # 16 runs: no claim, no card and no report row carries a verdict, each says why
    few = "too few prompts to judge (n = "
    verdicts = stored_claims_table(store, "tiny")["verdict"]
    assert all(v.startswith((few, "not measured")) for v in verdicts)  # tiny folds: most learners cannot train
    assert few in html and few in stops[0].verdict and all(s.value is None or few in s.verdict for s in stops[:4])
    # the entropy card and the report give the fair test (a learned head), never the by-construction EGTP r
    assert "learned attention-pooling head" in stops[0].detail and "positive control" in stops[0].verdict
    assert "positive control" in html and "EGTP head, test prompts" not in stops[0].detail
    assert stops[4].value is not None and "the oracle gives" in stops[4].detail and "(the floor)" in stops[4].detail

    monkeypatch.setattr("lenscope.cli.study.load_target", lambda args: target)
    assert main(["study", "--size", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "| claim | paper |" in out and "collect chat" in out and "skipped" in out
    assert main(["study", "--size", "tiny", "--train-only"]) == 0
    out = capsys.readouterr().out
    assert "collect chat" not in out and f"{claims}: skipped" in out

    report_file = tmp_path / "report.html"
    assert main(["report", "--dataset", "tiny", "--out", str(report_file)]) == 0
    assert report_file.read_text().startswith("<!DOCTYPE html>") and "wrote" in capsys.readouterr().out
    assert main(["report", "--dataset", "nothing"]) == 2
    assert "no dataset 'nothing'" in capsys.readouterr().err


def test_on_the_model_of_a_shipped_study_a_size_imports_a_sample_of_its_finished_answers(store, target,
                                                                                         monkeypatch, tmp_path):
    prompts = [PromptItem(f"Name a {thing}.", "user", thing) for thing in ("fruit", "planet", "colour", "tree")]
    source = Store(url=f"sqlite:///{tmp_path}/source.db", tensor_dir=tmp_path / "source-tensors")
    collect_dataset(source, target, "source", prompts, GenerationSettings(max_new_tokens=6, seed=0), batch_size=4)
    shipped = tmp_path / "shipped"
    export_generations(source, "source", shipped / "raw.jsonl.gz")
    header, records = read_generations(shipped / "raw.jsonl.gz")
    end = min(target.stop_ids)  # two answers ended (with the end token), two hit the cap (without it)
    records = [{**r, "finished": i % 2 == 0, "output_ids": [*r["output_ids"][:-1], end if i % 2 == 0 else 28]}
               for i, r in enumerate(records)]

    def ship(name: str, model: str) -> None:
        with gzip.open(shipped / name, "wt") as fh:
            fh.writelines(json.dumps(line) + "\n" for line in [{**header, "model": model}, *records])

    ship("own.jsonl.gz", target.source.spec)
    monkeypatch.setattr(study_jobs, "SHIPPED", shipped)
    monkeypatch.setitem(study_jobs.SHIPPED_SAMPLES, "tiny", ShippedSample("own.jsonl.gz", {"chat": 3}, seed=5))
    step = study_steps(store, target, "sampled", "tiny")[0]
    assert step.name.startswith("import the finished answers of 3 prompts drawn from the shipped study: chat 3")
    assert not step.done()
    step.run(no_progress)
    assert step.done()
    imported = store.runs_frame("sampled")
    expected = [r["prompt"] for r in sample_prompts_of(records, {"chat": 3}, seed=5) if r["finished"]]
    assert 1 <= len(expected) <= 2 and sorted(imported["prompt"]) == sorted(expected)  # finished answers only
    assert imported["finished"].all()
    censored = sum(not r["finished"] for r in sample_prompts_of(records, {"chat": 3}, seed=5))
    assert f"censored at the token cap (included), {censored} more that hit it not imported;" in (
        dataset_counts(store, "sampled").caption())
    assert not study_steps(store, target, "again", "tiny")[0].done()  # another dataset still lacks them

    ship("own.jsonl.gz", "embedded:gemma3-270m")  # another model's answers: the size collects its chunks
    assert study_steps(store, target, "sampled", "tiny")[0].name == f"collect {collection_text(SIZES['tiny'])}"
