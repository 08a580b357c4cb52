"""Hostile generations files: every record is checked (fields and their types, token ids against the vocabulary,
lengths against the context, settings, ``finished`` against the end token, the prompt) before anything is stored;
each bad file gets one line naming the file, the record and the field, exit 2, and an untouched store."""

from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from lenscope.cli import main
from lenscope.jobs.results.crossval import CENSORED_ANSWER_TOKENS, MAX_STEP
from lenscope.jobs.runs.generation_records import check_generations
from lenscope.jobs.runs.generations import FORMAT
from lenscope.models.target import lone_surrogate
from lenscope.store.schema import Dataset, DatasetRun, ModelRecord, Prompt, Run

MODEL = "embedded:smollm2-135m-instruct"
END = 2  # the fake model's end-of-turn id
HEADER = {"format": FORMAT, "dataset": "src", "layers": [1, 2], "model": MODEL}


def _prompt_ids(prompt: str, system_prompt: str = "default") -> list[int]:
    """The fake chat template: BOS, one id per character, the assistant header (TargetModel.chat_ids' checks)."""
    if not prompt.strip():
        raise ValueError("the prompt is empty")
    invalid = lone_surrogate(prompt)
    if invalid:
        raise ValueError(invalid)
    return [1, *(3 + ord(c) % 90 for c in prompt), 4]


def fake_model() -> SimpleNamespace:
    """What importing reads of a TargetModel, SmolLM2's limits included; it never computes features."""
    return SimpleNamespace(key="fake-model", source=SimpleNamespace(spec=MODEL, gguf_file=None), num_layers=2,
                           hidden_size=4, dtype="float32", vocab_size=49152, context_length=8192,
                           stop_ids={END}, chat_ids=_prompt_ids,
                           check_layers=lambda layers: [1, 2] if layers is None else list(layers),
                           features=lambda *a, **k: pytest.fail("features were computed"))


def record(prompt: str = "Name a fruit.", **changes) -> dict:
    base = {"prompt": prompt, "source": "sharegpt", "ref": "conv1", "scenario": "chat",
            "settings": {"max_new_tokens": 16, "temperature": 0.7, "top_p": 1.0, "seed": 0, "sampler": "rowgen-2"},
            "prompt_ids": _prompt_ids(prompt), "output_ids": [10, 11, 12, END], "finished": True}
    return {**base, **changes}


def _write(path, records, header=HEADER):
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in [header, *records])
    return path


def _store_rows() -> tuple[int, ...]:
    from lenscope.store.store import Store

    with Store().session() as s:
        return tuple(s.scalar(select(func.count()).select_from(t)) for t in (ModelRecord, Prompt, Run, Dataset,
                                                                                DatasetRun))


def _without(field: str) -> dict:
    out = record("Name a planet.")
    del out[field]
    return out


HOSTILE = [  # (the second record of the file, what the line says after "gen.jsonl.gz record 2: ")
    (record(output_ids=[10, 11, 12, 70000, END]),
     f"output_ids[3] = 70000 is not a token id of {MODEL} (vocabulary 49152)"),
    (record(output_ids=[10, -1, END]), f"output_ids[1] = -1 is not a token id of {MODEL} (vocabulary 49152)"),
    (record(output_ids=[10, "11", END]), f"output_ids[1] = '11' is not a token id of {MODEL} (vocabulary 49152)"),
    (record(output_ids=[10, 11.0, END]), f"output_ids[1] = 11.0 is not a token id of {MODEL} (vocabulary 49152)"),
    (record(output_ids=[True, END]), f"output_ids[0] = True is not a token id of {MODEL} (vocabulary 49152)"),
    (record(prompt_ids=[1, 49152, 4]), f"prompt_ids[1] = 49152 is not a token id of {MODEL} (vocabulary 49152)"),
    (_without("output_ids"), "no output_ids (a record holds prompt, source, ref, scenario, settings, prompt_ids, "
                             "output_ids, finished)"),
    (_without("settings"), "no settings"),
    (record(output_ids="10 11 2"), "output_ids must be a list of token ids, not a text ('10 11 2')"),
    (record(output_ids=[]), "output_ids is empty (a run holds at least one answer token)"),
    (record(output_ids=[10] * 19_999 + [END], settings={"max_new_tokens": 20_000, "seed": 0}),
     f"prompt_ids + output_ids = 15 + 20,000 = 20,015 tokens, past the context of {MODEL} (8,192 tokens)"),
    (record(output_ids=[10] * 99 + [END]), "output_ids holds 100 tokens, more than settings.max_new_tokens = 16"),
    (record(output_ids=[10, 11, 12]),
     f"finished is true, but the answer does not end with an end token of {MODEL} (output_ids[-1] = 12; "
     "end tokens: 2)"),
    (record(finished=False), f"finished is false, but the answer ends with an end token of {MODEL} "
                             "(output_ids[-1] = 2)"),
    (record(finished="yes"), "finished must be true or false, not a text ('yes')"),
    (record(finished=1), "finished must be true or false, not an integer (1)"),
    (record(settings={"temperature": "hot"}), "settings.temperature must be a finite number in [0, 10], not 'hot'"),
    (record(settings={"top_p": 2}), "settings.top_p must be a finite number in (0, 1], not 2"),
    (record(settings={"seed": 0, "max_new_tokens": None}), "settings.max_new_tokens is null"),
    (record(settings={"seed": 0, "color": "blue"}), "settings hold 'color', not a sampling setting"),
    (record(settings={"seed": 0, "system_prompt": "\ud800"}),
     "settings.system_prompt holds a lone surrogate (U+D800) at character 0: not valid Unicode text"),
    (record(settings="hot"), "settings must be a JSON object, not a text ('hot')"),
    (record(scenario="party"), "scenario 'party' is not one of chat, long, reasoning, rl"),
    (record(ref=None), "ref must be a text, not null (None)"),
    ({**record(), "prompt": "\ud800 hi"},
     "the prompt holds a lone surrogate (U+D800) at character 0: not valid Unicode text"),
    ({**record(), "prompt": " "}, "the prompt is empty"),
    (record(prompt_ids=[1, 5, 4]), f"prompt_ids differ from {MODEL}'s tokens of the prompt; import it with the model "
                                   "that generated it"),
    ([1, 2, 3], "is a list, not a JSON object"),
]


@pytest.mark.parametrize(("bad", "said"), HOSTILE, ids=[said[:40] for _, said in HOSTILE])
def test_a_hostile_record_gets_one_line_naming_it_and_nothing_is_stored(data_dir, tmp_path, monkeypatch, capsys,
                                                                        bad, said):
    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: fake_model())
    path = _write(tmp_path / "gen.jsonl.gz", [record(), bad, record("Name a tree.")])
    before = _store_rows()
    assert main(["import-generations", str(path), "--dataset", "x"]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.err + out.out, out.err
    assert lines[0].startswith(f"lenscope import-generations: error: gen.jsonl.gz record 2: {said}"), lines[0]
    assert _store_rows() == before == (0, 0, 0, 0, 0)
    assert not any(p.is_file() for p in data_dir.rglob("*.safetensors"))


def test_every_record_is_checked_even_those_a_finished_only_import_leaves_out(data_dir, tmp_path, monkeypatch,
                                                                               capsys):
    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: fake_model())
    censored_and_bad = record(output_ids=[10, 70000], finished=False)
    path = _write(tmp_path / "gen.jsonl.gz", [record(), censored_and_bad, record(output_ids=[1, -5, END])])
    assert main(["import-generations", str(path), "--dataset", "x", "--finished-only"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"lenscope import-generations: error: gen.jsonl.gz record 2: output_ids[1] = 70000 is not "
                           f"a token id of {MODEL} (vocabulary 49152) (1 more record fails these checks)")
    assert _store_rows() == (0, 0, 0, 0, 0)


def test_a_header_of_another_model_or_with_bad_layers_is_refused_before_the_records(data_dir, tmp_path, monkeypatch,
                                                                                    capsys):
    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: fake_model())
    gemma = _write(tmp_path / "gemma.jsonl.gz", [record(output_ids=[200_000, END])],
                   {**HEADER, "model": "embedded:gemma-3-270m-it"})
    assert main(["import-generations", str(gemma), "--dataset", "x"]) == 2
    assert f"gemma.jsonl.gz holds answers of embedded:gemma-3-270m-it, not of {MODEL}" in capsys.readouterr().err
    layers = _write(tmp_path / "layers.jsonl.gz", [record()], {**HEADER, "layers": "all"})
    assert main(["import-generations", str(layers), "--dataset", "x"]) == 2
    assert "layers.jsonl.gz: the header's layers must be a list of layer numbers, not 'all'" in capsys.readouterr().err
    assert _store_rows() == (0, 0, 0, 0, 0)


def test_valid_records_pass_and_every_failure_is_counted():
    records = [record(), record("Name a tree.", output_ids=[7] * 16, finished=False),
               record("Write it.", settings={"seed": 3, "system_prompt": "Be brief."},
                      prompt_ids=_prompt_ids("Write it."))]
    check_generations(fake_model(), "gen.jsonl.gz", HEADER, records)
    check_generations(fake_model(), "gen.jsonl.gz", {k: v for k, v in HEADER.items() if k != "model"}, records)
    bad = [record(finished="no"), *records, record(output_ids=[-1]), record(output_ids=[])]
    with pytest.raises(ValueError) as info:
        check_generations(fake_model(), "gen.jsonl.gz", HEADER, bad)
    assert str(info.value) == ("gen.jsonl.gz record 1: finished must be true or false, not a text ('no') (2 more "
                               "records fail these checks)")


def test_the_shipped_generations_pass_the_checks_on_the_embedded_model(target):
    from pathlib import Path

    from lenscope.jobs.runs.generations import read_generations

    path = Path(__file__).resolve().parents[3] / "data" / "generations" / "sharegpt500-cap1024-seed0.jsonl.gz"
    header, records = read_generations(path)
    check_generations(target, path.name, header, records)  # raises on any record
    assert target.vocab_size == 49152 and target.context_length == 8192 and target.stop_ids == {END}
    with pytest.raises(ValueError, match=f"record 1: output_ids\\[0\\] = 49152 is not a token id of {MODEL} "
                                         r"\(vocabulary 49152\)"):
        check_generations(target, path.name, header, [{**records[0], "output_ids": [49152, END]}])


def test_the_cli_imports_censored_runs_to_their_first_answer_tokens_when_asked(data_dir, tmp_path, monkeypatch,
                                                                              capsys):
    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: fake_model())
    seen = []
    monkeypatch.setattr("lenscope.jobs.runs.generations.import_generations",
                        lambda store, target, path, dataset, **kw: seen.append(kw) or (1, 0))
    path = _write(tmp_path / "gen.jsonl.gz", [record()])
    assert main(["import-generations", str(path), "--dataset", "x", "--censored-answer-tokens", "33"]) == 0
    assert main(["import-generations", str(path), "--dataset", "x"]) == 0
    assert [kw["censored_answer_tokens"] for kw in seen] == [33, None]
    with pytest.raises(SystemExit):
        main(["import-generations", str(path), "--dataset", "x", "--censored-answer-tokens", "0"])
    assert "--censored-answer-tokens: expected an integer >= 1, not '0'" in capsys.readouterr().err


@pytest.mark.parametrize(("size", "cut"), [("full", CENSORED_ANSWER_TOKENS), ("tiny", None)])
def test_the_study_imports_censored_runs_to_the_steps_it_reads_unless_its_size_trains_on_them(store, tmp_path,
                                                                                              monkeypatch, size, cut):
    import lenscope.jobs.study.pipeline as pipeline

    (tmp_path / "x-generations.jsonl.gz").write_bytes(b"")
    monkeypatch.setattr(pipeline, "SHIPPED", tmp_path)
    seen = []
    monkeypatch.setattr(pipeline, "import_generations",
                        lambda store, target, path, dataset, **kw: seen.append((path.name, kw)) or (0, 0))
    step = pipeline.study_steps(store, SimpleNamespace(num_layers=30), "x", size)[0]
    assert step.phase == "import"
    step.run(lambda *a: None)
    assert [(name, kw["censored_answer_tokens"]) for name, kw in seen] == [("x-generations.jsonl.gz", cut)]
    assert CENSORED_ANSWER_TOKENS == MAX_STEP + 1  # every step a censored run is tested at, 0..MAX_STEP
