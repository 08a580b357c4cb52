"""What ``lenscope.api`` takes: any iterable of prompts (read once) or a DataFrame, checked alike before any model
loads; one predictor name or several; ids that default to row numbers and never repeat; dataset names by the one
rule. A stand-in target computes made-up states (no model is loaded)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from lenscope import api
from lenscope.jobs.predictors.predict import read_prompts
from lenscope.models.target import SequenceFeatures

EMBEDDED = "embedded:smollm2-135m-instruct"
MEDIAN = 238.0  # the shipped constant's prediction


class FakeTarget:
    """The embedded model's name with one made-up token per word of a prompt (what predicting reads of it)."""

    source = SimpleNamespace(spec=EMBEDDED)
    num_layers = 2

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def chat_ids(self, prompt: str) -> list[int]:
        self.prompts.append(prompt)
        return [1, *range(5, 5 + len(prompt.split())), 2]

    def content_start(self, ids) -> int:
        return 1

    def features(self, chunk, layers) -> list[SequenceFeatures]:
        return [SequenceFeatures(input_ids=torch.tensor(ids), tokens=[str(i) for i in ids],
                                 entropy=torch.zeros(len(ids)), topk_ids=torch.zeros(len(ids), 5, dtype=torch.long),
                                 topk_probs=torch.full((len(ids), 5), 0.2),
                                 hidden={layer: torch.zeros(len(ids), 4) for layer in layers}) for ids in chunk]


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: every check here comes before it."""
    monkeypatch.setattr("lenscope.api.load_model", lambda *a, **k: pytest.fail("loaded the model"))


def test_a_generator_of_prompts_is_read_once_and_predicted(no_model):
    target = FakeTarget()
    out = api.predict((p for p in ["Hello there", "Write a poem"]), "constant", target=target)
    assert out["id"].tolist() == ["1", "2"] and out["predicted_tokens"].tolist() == [MEDIAN, MEDIAN]
    assert out["prompt_tokens"].tolist() == [4, 5] and target.prompts == ["Hello there", "Write a poem"]


def test_one_predictor_name_or_several_are_taken(no_model):
    one = api.predict(["Hello"], "constant", target=FakeTarget())
    assert one["predictor"].tolist() == ["constant"]
    several = api.predict(["Hello"], ("constant", "constant"), target=FakeTarget())
    assert several["predictor"].tolist() == ["constant"]  # named twice, predicted once
    with pytest.raises(TypeError, match="predictors must be a predictor name or a list of them, not int"):
        api.predict(["Hello"], 5, target=FakeTarget())
    with pytest.raises(TypeError, match="a predictor name is a str"):
        api.predict(["Hello"], ["constant", None], target=FakeTarget())
    with pytest.raises(ValueError, match="name at least one predictor"):
        api.predict(["Hello"], [], target=FakeTarget())


@pytest.mark.parametrize(("prompts", "said"), [
    ("Write a haiku.", "not a single str; wrap one prompt in a list: [prompt]"),
    (b"Write a haiku.", "not a single bytes"),
    (5, "prompts must be a list (or any iterable) of prompt texts, or a DataFrame"),
    (None, "not NoneType"),
    (["fine", 7], "prompt 2 is int, not a str"),
    (pd.DataFrame({"prompt": ["fine", None]}), "prompt 2 is missing (None or NaN), not a str"),
])
def test_a_bare_string_or_wrong_types_are_a_type_error_saying_what_is_expected(no_model, prompts, said):
    with pytest.raises(TypeError, match=re.escape(said)):
        api.predict(prompts, "constant", target=FakeTarget())


def test_a_data_frame_without_ids_is_numbered_by_row_and_gets_every_prompt_check(no_model):
    frame = pd.DataFrame({"prompt": ["Hello there", "Write a poem"]}, index=[10, 20])
    out = api.predict(frame, ["constant"], target=FakeTarget())
    assert out["id"].tolist() == ["1", "2"]
    with_ids = api.predict(frame.assign(id=["a", None]), "constant", target=FakeTarget())
    assert with_ids["id"].tolist() == ["a", "2"]
    for prompt, said in (("\ud800 hi", "^prompt 2: the prompt holds a lone surrogate"),
                         ("\x00\x01\x02", "prompt 2 looks like binary data"), ("  ", "prompt 2 is empty")):
        with pytest.raises(ValueError, match=said):
            api.predict(pd.DataFrame({"prompt": ["fine", prompt]}, dtype=object), "egtp")  # before any model load
    with pytest.raises(ValueError, match="^id 1: the id holds a lone surrogate"):
        api.predict(pd.DataFrame({"id": ["\udc00"], "prompt": ["hi"]}, dtype=object), "constant", target=FakeTarget())
    with pytest.raises(ValueError, match="the prompts frame has no 'prompt' column"):
        api.predict(pd.DataFrame({"text": ["hi"]}), "constant", target=FakeTarget())


def test_a_list_is_checked_before_the_model_loads(no_model):
    with pytest.raises(ValueError, match=r"^prompt 2 looks like binary data \(NUL or many control"):
        api.predict(["fine", "\x00binary\x00"], "egtp")
    with pytest.raises(ValueError, match="holds no prompts"):
        api.predict(iter([]), "egtp")


def test_duplicate_ids_are_refused_from_a_frame_and_from_a_file(no_model, tmp_path):
    frame = pd.DataFrame({"id": ["a", "b", "a"], "prompt": ["one", "two", "three"]})
    with pytest.raises(ValueError, match=r"^id 'a' is given to prompts 1 and 3 \(1 ids repeat\); give each prompt"):
        api.predict(frame, "constant", target=FakeTarget())
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "x", "prompt": "one"}\n{"id": "x", "prompt": "two"}\n')
    with pytest.raises(ValueError, match="p.jsonl: id 'x' is given to prompts 1 and 2"):
        read_prompts(path)
    path = tmp_path / "p.csv"
    path.write_text("id,prompt\n2,one\n,two\n")  # the second's id is its position: 2 again
    with pytest.raises(ValueError, match="p.csv: id '2' is given to prompts 1 and 2"):
        read_prompts(path)


def test_a_prompts_file_with_binary_content_is_refused_when_read(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("fine\n\x01\x02\x03\x04\n")
    with pytest.raises(ValueError, match="p.txt: prompt 2 looks like binary data"):
        read_prompts(path)


def test_the_frame_every_entry_gives_is_the_same():
    from lenscope.jobs.predictors.predict import prompt_table  # the one function every entry goes through

    texts = ["Hello there", "Write a poem"]
    expected = pd.DataFrame({"id": ["1", "2"], "prompt": texts})
    for given in (texts, tuple(texts), iter(texts), pd.Series(texts), pd.DataFrame({"prompt": texts})):
        pd.testing.assert_frame_equal(prompt_table(given), expected, check_dtype=False)


def test_dataset_names_entering_the_api_are_checked(no_model, store):
    for call in (lambda: api.load_predictor("egtp", dataset="../x"), lambda: api.load_runs("a/b", store),
                 lambda: api.predict(["Hello"], "egtp", dataset="x" * 100), lambda: api.runs_dataset("..", store)):
        with pytest.raises(ValueError, match="is not allowed: a dataset name is 1 to 64 letters"):
            call()
    with pytest.raises(TypeError, match="a dataset name is a str, not int"):
        api.load_predictor("egtp", dataset=3)
