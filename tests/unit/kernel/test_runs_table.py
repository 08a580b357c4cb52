"""A dataset's runs as one table (pandas, Hugging Face datasets, Parquet/CSV/JSON lines), from a store dataset and
from a generations file: the same columns, and a file's rows get the split the store gives the same runs."""

from __future__ import annotations

import sys
from dataclasses import replace
from types import SimpleNamespace

import pandas as pd
import pytest

from lenscope.cli import main
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.jobs.runs.generations import export_generations
from lenscope.jobs.runs.table import (
    COLUMNS,
    FILE_IDS,
    STORE_IDS,
    export_runs,
    generations_table,
    load_runs,
    runs_table,
    to_hf_dataset,
)
from lenscope.store.store import NewRun, Store
from tests.fakes import fake_generation, fake_target

LONG = "please explain how the tax brackets of this country work for a new resident"
# Two chunks of one conversation, a prompt inside another conversation's (one leak group), and plain prompts.
RUNS = [("sharegpt", "convA_0", "first chunk of conversation A"), ("sharegpt-long", "convA_3", "a later chunk of A"),
        ("sharegpt", "convB_0", LONG), ("sharegpt", "convC_0", f"Context first. {LONG} and more"),
        ("humaneval", "HumanEval/1", "def f(x):"), ("user", "", "a typed prompt")]
RUNS += [("sharegpt", f"conv{i}_0", f"Question number {i}?") for i in range(30)]


def _fill(store: Store, dataset: str = "d") -> None:
    target = fake_target()
    dataset_id = store.ensure_dataset(dataset, store.ensure_model(target), {})
    for i, (source, ref, text) in enumerate(RUNS):
        gen = replace(fake_generation(5 + i % 3, 2 + i % 4, seed=i), finished=i % 5 != 0)
        (run_id,) = store.save_runs(target, [NewRun(text, gen, source, ref)])
        store.add_to_dataset(dataset_id, run_id, "long" if source == "sharegpt-long" else "chat")


def test_store_table_has_every_run_with_texts_lengths_and_the_dataset_split(store):
    _fill(store)
    table = runs_table(store, "d")
    assert list(table.columns) == [*STORE_IDS, *COLUMNS] and len(table) == len(RUNS)
    kernel = dataset_runs(store, "d", include_censored=True)  # what every page and predictor reads
    for column in ("run_id", "prompt", "source_ref", "scenario", "prompt_tokens", "output_tokens", "finished",
                   "censored", "task", "group", "fold", "split"):
        assert table[column].tolist() == kernel[column].tolist(), column
    assert table["answer"].tolist() == ["x" * n for n in table["output_tokens"]]  # the stored answer text
    assert table["censored"].tolist() == [i % 5 == 0 for i in range(len(RUNS))]
    by_prompt = table.set_index("prompt")
    assert by_prompt.loc[f"Context first. {LONG} and more", "group"] == by_prompt.loc[LONG, "group"] == "sharegpt:convB"
    assert by_prompt.loc["a later chunk of A", "task"] == "sharegpt:convA"
    assert set(table["split"]) == {"train", "val", "test"}


def test_a_generations_file_gives_the_split_the_store_gives_the_same_runs(store, tmp_path, monkeypatch):
    _fill(store)
    path = tmp_path / "d.jsonl.gz"
    export_generations(store, "d", path)
    stored = runs_table(store, "d")
    monkeypatch.setattr("lenscope.jobs.runs.table.answer_model",
                        lambda header: pytest.fail("loaded the model without being asked"))
    shipped = generations_table(path)
    assert list(shipped.columns) == [*FILE_IDS, *COLUMNS]
    assert shipped["row"].tolist() == list(range(len(RUNS)))
    assert shipped["answer"].isna().all()  # the file has token ids only
    same = [c for c in COLUMNS if c != "answer"]
    pd.testing.assert_frame_equal(shipped[same], stored[same])
    assert shipped.attrs == {"dataset": "d", "model": "fake"}

    class Tokenizer:  # what an import stores as the answer: the ids decoded without special tokens
        def decode(self, ids, skip_special_tokens):
            assert skip_special_tokens
            return "x" * len(ids)

    checked = []
    monkeypatch.setattr("lenscope.jobs.runs.table.answer_model", lambda header: SimpleNamespace(tokenizer=Tokenizer()))
    monkeypatch.setattr("lenscope.jobs.runs.table.check_generations", lambda *args: checked.append(args[1]))
    assert generations_table(path, decode_answers=True)["answer"].tolist() == stored["answer"].tolist()
    assert checked == ["d.jsonl.gz"]  # with the model loaded, every check of the import


def test_parquet_csv_and_json_lines_round_trip(store, tmp_path):
    _fill(store)
    table = runs_table(store, "d")
    pd.testing.assert_frame_equal(pd.read_parquet(export_runs(table, tmp_path / "runs.parquet")), table,
                                  check_dtype=False)
    for name, read in (("runs.csv", pd.read_csv), ("runs.jsonl", lambda p: pd.read_json(p, lines=True))):
        back = read(export_runs(table, tmp_path / name))
        assert list(back.columns) == list(table.columns), name
        for column in ("run_id", "output_tokens", "finished", "fold", "split", "answer"):
            assert back[column].tolist() == table[column].tolist(), (name, column)
    with pytest.raises(ValueError, match=r"give a file ending in \.parquet, \.csv, \.jsonl"):
        export_runs(table, tmp_path / "runs.xlsx")
    assert not (tmp_path / "runs.xlsx").exists()


def test_hugging_face_dataset_has_every_row_and_column(store, monkeypatch):
    _fill(store)
    table = runs_table(store, "d")
    ds = to_hf_dataset(table)
    assert len(ds) == len(table) and ds.column_names == list(table.columns)
    assert ds["split"] == table["split"].tolist() and ds["output_tokens"] == table["output_tokens"].tolist()
    assert len(ds.filter(lambda row: row["split"] == "test")) == int((table["split"] == "test").sum())
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(ImportError, match="pip install datasets"):
        to_hf_dataset(table)


def test_load_runs_reads_the_store_else_the_shipped_study_else_names_the_datasets(store):
    with pytest.raises(ValueError, match=r"no runs in dataset 'd' \(its datasets: none\)"):
        load_runs("d", store)
    _fill(store)
    assert load_runs("d", store).attrs["origin"] == "store dataset 'd'"
    with pytest.raises(ValueError, match=r"no runs in dataset 'other' \(its datasets: d \(36 runs\)\)"):
        load_runs("other", store)


def test_cli_exports_a_store_dataset(store, tmp_path, capsys):
    _fill(store)
    out = tmp_path / "d.parquet"
    assert main(["export-runs", "--dataset", "d", "--out", str(out)]) == 0
    assert f"wrote {len(RUNS)} runs of the store dataset 'd' to {out}" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_parquet(out), runs_table(store, "d"), check_dtype=False)
    assert main(["export-runs", "--dataset", "d", "--out", str(tmp_path / "d.txt")]) == 2
    assert "give a file ending in .parquet" in capsys.readouterr().err
    path = tmp_path / "d.jsonl.gz"
    export_generations(store, "d", path)
    assert main(["export-runs", "--generations", str(path), "--out", str(tmp_path / "g.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "g.csv")) == len(RUNS)


def test_cli_on_an_empty_store_exports_the_shipped_study(data_dir, tmp_path, capsys):
    out = tmp_path / "study.parquet"
    assert main(["export-runs", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the store has no runs in dataset 'study': reading the shipped generations file" in printed
    table = pd.read_parquet(out)
    assert len(table) == 3014 and int(table["finished"].sum()) == 2065  # data/generations/README.md
    assert list(table.columns) == [*FILE_IDS, *COLUMNS] and set(table["split"]) == {"train", "val", "test"}
    assert table.groupby("task")["fold"].nunique().max() == 1  # a conversation never straddles folds
