"""``lenscope predict`` does its cheap checks before the model loads: prompts that are binary or not text, prompts too
long for the model's context (with its tokenizer alone) and predictors of another model are refused first; a long
prediction off a terminal prints its progress with the time left; an interrupted one says what is kept. A tiny
tokenizer-only checkpoint stands in for a model (no weights exist, so nothing can load them)."""

from __future__ import annotations

import io
import re

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, PreTrainedTokenizerFast

from lenscope.cli import main
from lenscope.cli import predict as predict_command
from lenscope.cli._common import PhaseBars
from lenscope.jobs.predictors.catalog import shipped_predictor
from lenscope.jobs.predictors.predict import LengthPredictor, predict_prompts
from tests.unit.kernel.test_api_inputs import FakeTarget

CONTEXT = 8  # tokens the tiny model's context holds


@pytest.fixture
def tokenizer_only(tmp_path):
    """A local checkpoint folder with a word-level tokenizer and a config, and no weights."""
    folder = tmp_path / "tiny-model"
    vocab = {"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate("a b c hello world".split())}}
    words = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", bos_token="<s>").save_pretrained(folder)
    LlamaConfig(vocab_size=len(vocab), hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1,
                num_key_value_heads=1, max_position_embeddings=CONTEXT).save_pretrained(folder)
    return folder


@pytest.fixture
def no_load(monkeypatch, data_dir):
    monkeypatch.setattr("lenscope.cli.predict.load_target", lambda args: pytest.fail("loaded the model"))


def _prompts(tmp_path, *lines: str):
    path = tmp_path / "prompts.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_binary_prompts_are_refused_before_the_model_loads(no_load, tmp_path, capsys):
    path = _prompts(tmp_path, "hello world", "\x01\x02\x03\x04 a", "a b")
    assert main(["predict", "--prompts", str(path), "--predictor", "constant"]) == 2
    assert capsys.readouterr().err == ("lenscope predict: error: prompts.txt: prompt 2 looks like binary data (NUL "
                                       "or many control characters), not text\n")


def test_a_prompt_too_long_for_the_context_is_refused_with_the_tokenizer_alone(no_load, tokenizer_only, tmp_path,
                                                                              capsys):
    path = _prompts(tmp_path, "hello world", " ".join(["a"] * 20))
    assert main(["predict", "--prompts", str(path), "--predictor", "constant", "--model", str(tokenizer_only)]) == 2
    assert capsys.readouterr().err == ("lenscope predict: error: prompt 2: the prompt has 20 tokens but the model's "
                                       f"context holds {CONTEXT}\n")


def test_a_predictor_of_another_model_is_refused_before_the_model_loads(no_load, tokenizer_only, tmp_path, capsys):
    path = _prompts(tmp_path, "hello world")
    assert main(["predict", "--prompts", str(path), "--predictor", "constant", "--model", str(tokenizer_only)]) == 2
    err = capsys.readouterr().err
    assert "predictor 'constant' was trained on the states of embedded:smollm2-135m-instruct, not of " in err
    assert str(tokenizer_only) in err


def test_an_interrupted_predict_says_nothing_was_written(no_load, tmp_path, monkeypatch, capsys):
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("lenscope.jobs.predictors.predict.predict_prompts", stopped)
    monkeypatch.setattr("lenscope.cli.predict.load_target", lambda args: FakeTarget())
    out = tmp_path / "predictions.csv"
    assert main(["predict", "--prompts", str(_prompts(tmp_path, "hello")), "--predictor", "constant", "--out",
                 str(out)]) == 130
    note = predict_command.INTERRUPT_NOTE
    assert capsys.readouterr().err == f"lenscope predict: {note}\n"
    assert "no predictions were written" in note and not out.exists()


def test_a_long_prediction_off_a_terminal_prints_its_count_and_the_time_left(monkeypatch):
    monkeypatch.setattr("lenscope.cli._common.LOG_INTERVAL_S", 0.0)  # a line on every report, not every 30 s
    stream = io.StringIO()
    target = FakeTarget()
    predictor = LengthPredictor(shipped_predictor("constant"), target)
    with PhaseBars(terminal=False, stream=stream) as bars:
        predict_prompts(target, [f"prompt number {k}" for k in range(40)], [predictor], bars)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "prefilling prompts: started (16/40)"
    counts = [line for line in lines if re.fullmatch(r"prefilling prompts: \d+/40 after \d\d:\d\d(, about "
                                                     r"\d\d:\d\d left)?", line)]
    assert [line.split()[2] for line in counts] == ["16/40", "32/40", "40/40"], lines
    assert counts[-1].endswith(", about 00:00 left")
    assert re.fullmatch(r"prefilling prompts: done 40/40 in \d+\.\d s", lines[-1])
