"""``export-runs --generations`` checks every record as ``import-generations`` does: without a model, what needs none
(fields and their types, texts, scenario, settings, token lists); with ``--decode-answers``, which loads the model,
every check of the import (token ids, context, end tokens, the prompt's tokens). A bad record gets the import's one
line naming the file and the record, exit 2, and nothing is written."""

from __future__ import annotations

import pandas as pd
import pytest

from lenscope.cli import main
from lenscope.jobs.runs.table import generations_table
from tests.unit.kernel.test_generation_records import HOSTILE, _without, _write, fake_model, record

MODEL_FREE = [  # (the second record of the file, what the line says after "gen.jsonl.gz record 2: ")
    (_without("prompt_ids"), "no prompt_ids (a record holds prompt, source, ref, scenario, settings, prompt_ids, "
                             "output_ids, finished)"),
    (record(finished="yes"), "finished must be true or false, not a text ('yes')"),
    (record(finished=1), "finished must be true or false, not an integer (1)"),
    (record(output_ids="10 11 2"), "output_ids must be a list of token ids, not a text ('10 11 2')"),
    (record(output_ids=[]), "output_ids is empty (a run holds at least one answer token)"),
    (record(output_ids=[10] * 99 + [2]), "output_ids holds 100 tokens, more than settings.max_new_tokens = 16"),
    (record(settings={"temperature": "hot"}), "settings.temperature must be a finite number in [0, 10], not 'hot'"),
    (record(scenario="party"), "scenario 'party' is not one of chat, long, reasoning, rl"),
    (record(ref=None), "ref must be a text, not null (None)"),
    ({**record(), "prompt": "\ud800 hi"},
     "the prompt holds a lone surrogate (U+D800) at character 0: not valid Unicode text"),
    ([1, 2, 3], "is a list, not a JSON object"),
]


@pytest.mark.parametrize(("bad", "said"), MODEL_FREE, ids=[said[:40] for _, said in MODEL_FREE])
def test_a_bad_record_is_refused_by_export_runs_as_by_the_import(data_dir, tmp_path, capsys, bad, said):
    path = _write(tmp_path / "gen.jsonl.gz", [record(), bad, record("Name a colour.")])
    out = tmp_path / "runs.csv"
    assert main(["export-runs", "--generations", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"lenscope export-runs: error: gen.jsonl.gz record 2: {said}\n"
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["gen.jsonl.gz"]


def test_every_failing_record_is_counted_and_good_records_export(data_dir, tmp_path):
    path = _write(tmp_path / "gen.jsonl.gz", [record(), _without("prompt_ids"), record(finished="no"), record()])
    with pytest.raises(ValueError, match=r"gen.jsonl.gz record 2: no prompt_ids .* \(1 more record fails these"):
        generations_table(path)
    good = _write(tmp_path / "good.jsonl.gz", [record(), record("Name a colour.", finished=False)])
    table = generations_table(good)
    assert table["finished"].tolist() == [True, False] and table["prompt_tokens"].tolist() == [15, 16]
    out = tmp_path / "good.csv"
    assert main(["export-runs", "--generations", str(good), "--out", str(out)]) == 0
    assert pd.read_csv(out)["finished"].tolist() == [True, False]


@pytest.mark.parametrize(("bad", "said"), HOSTILE, ids=[said[:40] for _, said in HOSTILE])
def test_with_the_model_loaded_export_runs_checks_every_record_as_the_import(data_dir, tmp_path, monkeypatch, capsys,
                                                                            bad, said):
    """``--decode-answers`` loads the model the file names: then every check of the import runs, the same lines."""
    model = fake_model()
    model.tokenizer = None  # never reached: the checks come first
    monkeypatch.setattr("lenscope.jobs.runs.table.answer_model", lambda header: model)
    path = _write(tmp_path / "gen.jsonl.gz", [record(), bad, record("Name a tree.")])
    out = tmp_path / "runs.csv"
    assert main(["export-runs", "--generations", str(path), "--decode-answers", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lenscope export-runs: error: gen.jsonl.gz record 2: {said}")
    assert not out.exists()
