"""The CLI's data output (``--format {table,csv,json,parquet}`` to stdout or ``--out``), ``lenscope datasets`` and
``lenscope predictors``, and ``collect`` saying where it writes without ``--dataset``."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from lenscope.cli import main

N_REQUESTS = 40


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 0.05:.2f},{8 + i % 40},{120 + (i * 37) % 300}\n" for i in range(N_REQUESTS)))
    return path


def _json(capsys) -> object:
    """The whole of stdout as one JSON document (nothing else may be there)."""
    captured = capsys.readouterr()
    return json.loads(captured.out)


def test_simulate_writes_its_summary_as_json_and_latencies_as_csv_or_parquet(data_dir, trace, tmp_path, capsys):
    assert main(["simulate", "--trace", str(trace), "--format", "json"]) == 0
    doc = _json(capsys)
    assert doc["requests"] == N_REQUESTS and doc["predictor"] == "oracle"
    assert doc["summary"]["all_e2e_p99_s"] > 0 and "throughput_tok_s" in doc["summary"]
    assert main(["simulate", "--trace", str(trace), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    latencies = pd.read_csv(io.StringIO(out))
    assert len(latencies) == N_REQUESTS and "e2e_s" in " ".join(latencies.columns)
    path = tmp_path / "latencies.parquet"
    assert main(["simulate", "--trace", str(trace), "--out", str(path)]) == 0  # the suffix picks the format
    out = capsys.readouterr().out
    assert "e2e P50/P90/P99" in out and f"per-request latencies -> {path}" in out  # the text still shows
    assert len(pd.read_parquet(path)) == N_REQUESTS


def test_a_sweep_and_a_qps_sweep_write_their_tables_as_json(data_dir, trace, capsys):
    assert main(["simulate", "--trace", str(trace), "--sweep", "--sweep-qps", "1,2", "--format", "json"]) == 0
    rows = _json(capsys)
    assert isinstance(rows, list) and {r["qps"] for r in rows} == {1.0, 2.0}
    assert main(["qps-sweep", "--trace", str(trace), "--qps-values", "1,4", "--policies", "rr+fcfs,rr+sjf",
                 "--format", "json"]) == 0
    doc = _json(capsys)
    assert doc["requests"] == N_REQUESTS and set(doc["saturates_at_qps"]) == {r["policy"] for r in doc["rows"]}
    assert len(doc["rows"]) == 4 and doc["qps"] == [1.0, 4.0]


def test_the_outlets_preset_writes_its_seed_table(data_dir, trace, tmp_path, capsys):
    argv = ["outlets-preset", "--trace", str(trace), "--requests", "30", "--seeds", "2", "--min-output-tokens", "0",
            "--qps", "4"]
    assert main([*argv, "--format", "json"]) == 0
    doc = _json(capsys)
    assert doc["seeds"] == 2 and doc["workload"] == "uniform" and doc["summary"] and doc["per_seed"]
    assert {"predictor", "policy", "short_e2e_p99_s", "short_e2e_p99_s_lo"} <= set(doc["summary"][0])
    path = tmp_path / "preset.csv"
    assert main([*argv, "--format", "csv", "--out", str(path)]) == 0
    assert "OUTLETS preset" in capsys.readouterr().out
    assert len(pd.read_csv(path)) == len(doc["summary"])


def test_evaluate_predictions_writes_metrics_and_confusion(data_dir, tmp_path, capsys):
    path = tmp_path / "preds.csv"
    path.write_text("true_tokens,predicted_tokens\n" + "".join(f"{10 + i * 5},{12 + i * 5 + (i % 3) * 4}\n"
                                                              for i in range(60)))
    assert main(["evaluate-predictions", str(path), "--format", "json"]) == 0
    doc = _json(capsys)
    assert doc["n"] == 60 and doc["predictions"] == "token lengths"
    assert doc["mae"]["lo"] <= doc["mae"]["value"] <= doc["mae"]["hi"] and doc["kendall_tau"]["value"] > 0.9
    assert sum(v for row in doc["confusion"] for k, v in row.items() if k != "true length") == 60
    assert main(["evaluate-predictions", str(path), "--format", "csv"]) == 0
    confusion = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert "true length" in confusion.columns


def test_claims_write_every_table_as_json_and_one_long_table(data_dir, monkeypatch, capsys):
    from lenscope.jobs.runs.datasets import DatasetCounts

    claims = pd.DataFrame({"claim": ["a < b", "c < d"], "difference": [-3.0, float("nan")], "verdict": ["x", "y"]})
    report = SimpleNamespace(claims=claims, by_scenario={"chat": claims.iloc[:1]},
                             predictors=pd.DataFrame({"predictor": ["a"], "mae": [10.0]}),
                             head_options=pd.DataFrame(), config={"skipped": {"pia": "no model"}})
    monkeypatch.setattr("lenscope.cli.claims._resolve", lambda args: (None, args.dataset, 3, 1))
    monkeypatch.setattr("lenscope.jobs.results.claims.claims_report", lambda *a, **k: report)
    monkeypatch.setattr("lenscope.jobs.runs.datasets.dataset_counts",
                        lambda *a, **k: DatasetCounts(10, 2, 10, {"train": 6, "val": 2, "test": 2}))
    assert main(["claims", "--dataset", "syn", "--no-pia", "--format", "json"]) == 0
    doc = _json(capsys)
    assert doc["dataset"] == "syn" and doc["counts"]["censored"] == 2 and doc["skipped"] == {"pia": "no model"}
    assert [c["claim"] for c in doc["claims"]] == ["a < b", "c < d"] and doc["claims"][1]["difference"] is None
    assert doc["by_scenario"]["chat"][0]["verdict"] == "x"
    assert main(["claims", "--dataset", "syn", "--no-pia", "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert table["scope"].tolist() == ["all", "all", "chat"]


def test_parquet_is_not_written_to_a_terminal(data_dir, trace, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True, raising=False)
    assert main(["simulate", "--trace", str(trace), "--format", "parquet"]) == 2
    assert "parquet is binary: write it to a file with --out PATH" in capsys.readouterr().err


def _stocked_store(store):
    from tests.fakes import cut_generation, fake_generation, fake_target

    target = fake_target()
    dataset = store.ensure_dataset("dev", target, {})
    for i, (scenario, finished) in enumerate([("chat", True), ("chat", False), ("reasoning", True)]):
        generation = fake_generation(3, 4 + i, seed=i)
        generation = generation if finished else cut_generation(generation, 2)  # the study's import of a censored run
        store.add_to_dataset(dataset, store.save_run(target, f"prompt {i}", generation), scenario)
    store.ensure_dataset("empty", target, {})
    metrics = {"static_mae": 12.5, "static_mae_lo": 10.0, "static_mae_hi": 15.0, "kendall_tau": 0.25,
               "eval_split": "test", "n_runs": 3}
    store.save_predictor("static:dev:L2:egtp", "static", {}, metrics, dataset_id=dataset)
    store.save_predictor("probe:elsewhere", "probe", {}, {})


def test_datasets_and_predictors_list_what_the_store_holds(store, capsys):
    assert main(["datasets"]) == 0
    assert "has no dataset yet" in capsys.readouterr().out
    _stocked_store(store)
    assert main(["datasets", "--format", "json"]) == 0
    rows = {r["dataset"]: r for r in _json(capsys)}
    assert rows["dev"]["runs"] == 3 and rows["dev"]["finished"] == 2 and rows["dev"]["censored"] == 1
    assert rows["dev"]["features_cut"] == 1 and rows["empty"]["features_cut"] == 0
    assert rows["dev"]["scenarios"] == {"chat": 2, "reasoning": 1} and rows["dev"]["model"] == "fake"
    assert rows["empty"]["runs"] == 0 and rows["empty"]["scenarios"] == {}
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "dev" in out and "chat 2, reasoning 1" in out
    assert main(["predictors", "--format", "json"]) == 0
    rows = _json(capsys)
    assert [r["name"] for r in rows] == ["static:dev:L2:egtp", "probe:elsewhere"]
    assert rows[0]["dataset"] == "dev" and rows[0]["model"] == "fake" and rows[0]["static_mae"] == 12.5
    assert rows[1]["dataset"] is None and rows[1]["static_mae"] is None
    assert main(["predictors", "--dataset", "dev"]) == 0
    out = capsys.readouterr().out
    assert "static:dev:L2:egtp" in out and "12.5 [10.0, 15.0]" in out and "probe:elsewhere" not in out
    assert main(["predictors", "--kind", "drafter"]) == 0
    assert "no trained predictor of kind 'drafter'" in capsys.readouterr().out


def test_collect_without_dataset_says_where_it_writes(data_dir, monkeypatch, capsys):
    from lenscope.jobs.runs.collect import CollectReport
    from tests.fakes import fake_target

    seen = {}

    def collect(store, target, dataset, prompts, settings, samples, **kwargs):
        seen["dataset"] = dataset
        kwargs["on_progress"](1, 2, "sampling | 5 tok/s")
        return CollectReport(1, [1, 2], generated=2, cached=0, finished=2, tokens=10, seconds=2.0)

    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: fake_target())
    monkeypatch.setattr("lenscope.analysis.data.prompts.sample_prompts", lambda *a, **k: ["p1", "p2"])
    monkeypatch.setattr("lenscope.jobs.runs.collect.collect_dataset", collect)
    assert main(["collect", "--n", "2"]) == 0
    captured = capsys.readouterr()
    assert seen["dataset"] == "default"
    assert "note: no --dataset given: collecting into dataset 'default' of the store at " in captured.err
    assert str(data_dir) in captured.err and "collect default · sampling: started" in captured.err
    assert "dataset 'default': 2 runs (2 generated, 0 from the cache, 2/2 ended with end-of-turn) in " in captured.out
