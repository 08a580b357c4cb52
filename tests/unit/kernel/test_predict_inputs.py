"""What ``lenscope predict`` reads before the model loads: the prompts file (JSON lines, CSV, plain text) and the
predictor catalog with the shipped predictors under data/predictors, whose weights are checked against the hashes
in their manifests. Nothing here loads the target model."""

from __future__ import annotations

import json
import math
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from lenscope.jobs.predictors.catalog import (
    CATALOG,
    MANIFEST,
    SHIPPED_DIR,
    SOFT_LABEL_KINDS,
    available,
    entry,
    shipped_names,
    shipped_predictor,
    shipped_summary,
)
from lenscope.jobs.predictors.predict import QUANTILE_COLUMNS, LengthPredictor, Prefill, read_prompts
from lenscope.models.target import SequenceFeatures

STUDY = ["egtp", "mean", "max", "last", "plp", "probe", "drafter", "constant"]  # the study's own predictors
SOFT = ["egtp", "mean", "max", "last", "plp"]
NAMES = ", ".join(CATALOG)
EMBEDDED = "embedded:smollm2-135m-instruct"


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- prompts files ---------------------------------------------------------------------------------------------


def test_json_lines_keep_given_ids_and_number_the_others_by_position(tmp_path):
    path = write(tmp_path, "p.jsonl", '{"id": "a", "prompt": "Write a haiku."}\n\n{"prompt": "Explain tides."}\n'
                                      '{"id": 7, "prompt": "Sum 2 and 2."}\n{"id": null, "prompt": "Hi"}\n')
    frame = read_prompts(path)
    assert list(frame.columns) == ["id", "prompt"]
    assert frame["id"].tolist() == ["a", "2", "7", "4"]  # blank lines are skipped, not counted
    assert frame["prompt"].tolist() == ["Write a haiku.", "Explain tides.", "Sum 2 and 2.", "Hi"]
    assert read_prompts(write(tmp_path, "p.json", '{"prompt": "x"}\n'))["id"].tolist() == ["1"]


def test_csv_reads_the_prompt_column_with_ids_verbatim_or_by_position(tmp_path):
    frame = read_prompts(write(tmp_path, "p.csv", 'id,prompt,other\n007,"Hello, world",x\nq2,"two\nlines",y\n'))
    assert frame.to_dict("records") == [{"id": "007", "prompt": "Hello, world"}, {"id": "q2", "prompt": "two\nlines"}]
    frame = read_prompts(write(tmp_path, "q.csv", "prompt\nfirst\nsecond\nthird\n"))
    assert frame["id"].tolist() == ["1", "2", "3"] and frame["prompt"].tolist() == ["first", "second", "third"]
    frame = read_prompts(write(tmp_path, "r.csv", "id,prompt\n,first\nb,second\n"))
    assert frame["id"].tolist() == ["1", "b"]  # an empty id cell is no id


@pytest.mark.parametrize("name", ["p.txt", "prompts", "p.md"])
def test_plain_text_is_one_prompt_a_line_numbered_from_one(tmp_path, name):
    frame = read_prompts(write(tmp_path, name, "Write a poem.\n\n   \nWhat is 2+2?\n  indented stays  \n"))
    assert frame["id"].tolist() == ["1", "2", "3"]
    assert frame["prompt"].tolist() == ["Write a poem.", "What is 2+2?", "  indented stays  "]


@pytest.mark.parametrize(("name", "text"), [("p.txt", "Hello\n"), ("p.jsonl", '{"prompt": "Hello"}\n'),
                                            ("p.csv", "prompt\nHello\n")])
def test_a_byte_order_mark_is_not_part_of_the_first_prompt(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert read_prompts(path).to_dict("records") == [{"id": "1", "prompt": "Hello"}]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("p.txt", "", "p.txt holds no prompts"),
    ("p.txt", "\n  \n", "p.txt holds no prompts"),
    ("p.jsonl", "\n", "p.jsonl holds no prompts"),
    ("p.csv", "", "p.csv holds no prompts"),
    ("p.csv", "id,prompt\n", "p.csv holds no prompts"),
    ("p.csv", "id,text\n1,hello\n", "p.csv has no 'prompt' column (columns: id, text)"),
    ("p.jsonl", '{"prompt": "ok"}\n{"prompt": "also"\n', "p.jsonl line 2 is not JSON"),
    ("p.jsonl", '{"text": "hello"}\n', 'p.jsonl line 1 has no "prompt" field'),
    ("p.jsonl", '["hello"]\n', 'p.jsonl line 1 has no "prompt" field'),
    ("p.jsonl", '{"prompt": "ok"}\n{"prompt": "  "}\n{"prompt": ""}\n',
     "p.jsonl: prompt 2 is empty or not text (2 such prompts)"),
    ("p.jsonl", '{"prompt": 5}\n', "p.jsonl: prompt 1 is empty or not text"),
    ("p.csv", "id,prompt\na,fine\nb,\n", "p.csv: prompt 2 is empty or not text"),
])
def test_bad_prompt_files_are_named_with_what_is_wrong(tmp_path, name, text, message):
    with pytest.raises(ValueError) as info:
        read_prompts(write(tmp_path, name, text))
    assert message in str(info.value)


def test_a_missing_prompts_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="prompts file '.*nope.txt' does not exist"):
        read_prompts(tmp_path / "nope.txt")


# --- the catalog and the shipped predictors ----------------------------------------------------------------------


def test_the_catalog_names_every_predictor_and_rejects_others_listing_them():
    assert [n for n in CATALOG if n in STUDY] == STUDY
    assert entry("egtp").kind == "egtp_static" and entry("plp").kind == "egtp_plp"
    for name in ("EGTP", "nope", ""):
        with pytest.raises(ValueError, match=f"unknown predictor {name!r}; choose from {NAMES}"):
            entry(name)
    with pytest.raises(ValueError, match=f"choose from {NAMES}"):
        shipped_predictor("nope")


@pytest.fixture
def shipped_egtp(tmp_path):
    """A copy of the shipped egtp head in its own predictors folder (``tmp_path/egtp``)."""
    shutil.copytree(SHIPPED_DIR / "egtp", tmp_path / "egtp")
    return tmp_path


def test_a_copied_shipped_predictor_loads_with_its_manifest(shipped_egtp):
    files = shipped_predictor("egtp", shipped_egtp)
    assert (files.name, files.kind, files.path) == ("egtp", "egtp_static", shipped_egtp / "egtp")
    assert files.model == EMBEDDED and files.source == "shipped"
    assert set(files.manifest["files"]) == {"model.safetensors", "model.json"}
    assert files.manifest["training_data"]["runs"] == 3014
    assert shipped_names(shipped_egtp) == ["egtp"]
    table = available(root=shipped_egtp)
    assert table["predictor"].tolist() == list(CATALOG)
    assert table.set_index("predictor")["shipped"].to_dict() == {n: n == "egtp" for n in CATALOG}


def test_a_changed_weight_byte_fails_the_hash_check(shipped_egtp):
    weights = shipped_egtp / "egtp" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError) as info:
        shipped_predictor("egtp", shipped_egtp)
    message = str(info.value)
    assert f"{weights} does not match the hash in its manifest" in message
    assert "`git checkout data/predictors`" in message and "python -m lenscope study --size full" in message


def test_a_missing_weight_file_or_manifest_is_named(shipped_egtp):
    (shipped_egtp / "egtp" / "model.json").unlink()
    with pytest.raises(ValueError, match="shipped predictor 'egtp' lacks model.json; restore it with `git checkout"):
        shipped_predictor("egtp", shipped_egtp)
    (shipped_egtp / "egtp" / MANIFEST).unlink()
    with pytest.raises(ValueError) as info:
        shipped_predictor("egtp", shipped_egtp)
    assert f"no shipped predictor 'egtp' under {shipped_egtp} (shipped: none)" in str(info.value)
    assert "python -m lenscope study --size full" in str(info.value) and "--dataset" in str(info.value)
    shutil.copytree(SHIPPED_DIR / "constant", shipped_egtp / "constant")
    with pytest.raises(ValueError, match=r"\(shipped: constant\)"):
        shipped_predictor("mean", shipped_egtp)


def test_a_manifest_of_another_format_is_refused(shipped_egtp):
    path = shipped_egtp / "egtp" / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": "something/2"}))
    with pytest.raises(ValueError, match="is not a lenscope-predictor/1 manifest"):
        shipped_predictor("egtp", shipped_egtp)


def test_every_committed_predictor_is_shipped_and_matches_its_manifest():
    assert set(STUDY) <= set(shipped_names())
    for name in shipped_names():
        files = shipped_predictor(name)  # raises on a weight file that does not match its hash
        assert files.kind == CATALOG[name].kind and files.model == EMBEDDED
        assert files.manifest["training_data"]["dataset"] == "study"
    assert shipped_predictor("constant").manifest["config"]["median"] > 0


def test_the_shipped_summary_has_each_predictors_test_mae_with_its_ci_and_the_heads_interval_coverage():
    table = shipped_summary().set_index("predictor")
    assert table.index.tolist() == shipped_names()
    table = table.loc[STUDY]
    assert table["trained on"].str.fullmatch(r"\d+ (finished )?train runs of 'study'").all()
    measured = table.drop(index="constant")  # the reference: the others' "vs constant" compare with it
    assert (measured["test runs"] == 385).all()
    for column in ("static MAE", "lo", "hi", "vs constant", "vs constant lo", "vs constant hi"):
        assert measured[column].map(lambda v: isinstance(v, float) and math.isfinite(v)).all(), column
    with_mae = table[table["static MAE"].notna()]  # the constant's own MAE only in manifests that record it
    assert with_mae.index.tolist() in (STUDY, list(measured.index))
    assert (with_mae["lo"] < with_mae["static MAE"]).all() and (with_mae["static MAE"] < with_mae["hi"]).all()
    assert (measured["vs constant lo"] <= measured["vs constant"]).all()
    assert (measured["vs constant"] <= measured["vs constant hi"]).all()
    assert [n for n in STUDY if CATALOG[n].kind in SOFT_LABEL_KINDS] == SOFT
    assert table.loc[SOFT, "interval coverage"].between(0.5, 1.0).all()
    assert table.drop(index=SOFT)["interval coverage"].isna().all()


# --- loaded predictors on made-up target states (no model) ---------------------------------------------------------


def fake_prefill(gen: torch.Generator, tokens: int, layers=(15, 30), d: int = 576) -> Prefill:
    features = SequenceFeatures(input_ids=torch.arange(tokens), tokens=[f"t{i}" for i in range(tokens)],
                                entropy=torch.rand(tokens, generator=gen) * 3,
                                topk_ids=torch.zeros(tokens, 5, dtype=torch.long),
                                topk_probs=torch.full((tokens, 5), 0.2),
                                hidden={lay: torch.randn(tokens, d, generator=gen) for lay in layers})
    return Prefill(prompt=f"a prompt of {tokens} tokens", features=features, content_start=2)


def test_shipped_heads_give_finite_ordered_quantiles_on_made_up_states_and_refuse_another_model():
    target = SimpleNamespace(source=SimpleNamespace(spec=EMBEDDED))
    gen = torch.Generator().manual_seed(0)
    prefills = [fake_prefill(gen, n) for n in (6, 11, 25)]
    for name in ("egtp", "plp"):
        predictor = LengthPredictor(shipped_predictor(name), target)
        assert predictor.name == name and predictor.layers == [30]
        out = predictor.from_prefills(prefills)
        assert list(out.columns) == ["predicted_tokens", *QUANTILE_COLUMNS] and len(out) == 3
        assert np.isfinite(out.to_numpy()).all() and (out.to_numpy() > 0).all()
        assert (out["q10_tokens"] <= out["q50_tokens"]).all() and (out["q50_tokens"] <= out["q90_tokens"]).all()
    probe = LengthPredictor(shipped_predictor("probe"), target).from_prefills(prefills)
    assert list(probe.columns) == ["predicted_tokens"] and np.isfinite(probe["predicted_tokens"]).all()
    constant = LengthPredictor(shipped_predictor("constant"), target)
    assert constant.layers == []
    pd.testing.assert_frame_equal(constant.from_prefills(prefills), pd.DataFrame({"predicted_tokens": [238.0] * 3}))
    other = SimpleNamespace(source=SimpleNamespace(spec="HuggingFaceTB/SmolLM2-360M-Instruct"))
    with pytest.raises(ValueError, match=f"trained on the states of {EMBEDDED}, not of HuggingFaceTB/SmolLM2-360M"):
        LengthPredictor(shipped_predictor("egtp"), other)
