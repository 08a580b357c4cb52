"""A model's own code never runs: a local checkpoint that declares custom code (``auto_map``) is refused in one
line before transformers sees it, and every ``from_pretrained`` call passes ``trust_remote_code=False``, so
that even past that check transformers refuses instead of asking "Do you wish to run the custom code? [y/N]".
stdin answers "y" throughout; the custom code would leave a marker file."""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest
import transformers

import lenscope.models.sources as sources
from lenscope.cli import main
from lenscope.models.gguf_checkpoint import load_converted
from lenscope.models.sources import LOCAL_LOAD_OPTIONS, ModelSource
from lenscope.models.target import TargetModel

REPO = Path(__file__).resolve().parents[3]


def _tokenizer_files(folder: Path) -> None:
    """A loadable two-token tokenizer, so that loading gets as far as the model."""
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))


@pytest.fixture
def answer_yes(monkeypatch, tmp_path):
    """stdin answers "y" to any question; returns the marker file the custom code would write."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 10))
    monkeypatch.setenv("LENSCOPE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "custom-code-ran"


def _custom_model(folder: Path, marker: Path, where: str) -> Path:
    """A checkpoint whose ``where`` (config.json or tokenizer_config.json) maps to ``custom.py``, which writes
    ``marker`` when imported."""
    folder.mkdir()
    _tokenizer_files(folder)
    (folder / "custom.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
                                      "from transformers import PretrainedConfig, PreTrainedModel\n"
                                      "class EvilConfig(PretrainedConfig):\n    model_type = 'evilmodel'\n"
                                      "class EvilModel(PreTrainedModel):\n    config_class = EvilConfig\n"
                                      "class EvilTokenizer:\n    pass\n")
    config = {"model_type": "evilmodel"}
    if where == "config.json":
        config["auto_map"] = {"AutoConfig": "custom.EvilConfig", "AutoModelForCausalLM": "custom.EvilModel"}
    else:
        (folder / "tokenizer_config.json").write_text(json.dumps(  # no tokenizer_class: only its own code
            {"auto_map": {"AutoTokenizer": ["custom.EvilTokenizer", None]}}))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_a_checkpoint_with_custom_code_is_refused_in_one_line(tmp_path, answer_yes, capsys, where):
    folder = _custom_model(tmp_path / "evil", answer_yes, where)
    with pytest.raises(ValueError, match=rf"declares custom code \(auto_map in {where}\); lenscope never runs"):
        TargetModel.load(str(folder))
    with pytest.raises(ValueError, match="declares custom code"):
        TargetModel.load(ModelSource(str(folder), str(folder)))  # as the app passes it: resolved already
    capsys.readouterr()
    assert main(["collect", "--scenario", "chat", "--n", "1", "--model", str(folder)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1, out.err
    assert out.err.startswith("lenscope collect: error: ") and f"auto_map in {where}" in out.err
    assert "Traceback" not in out.err and "[y/N]" not in out.err
    assert not answer_yes.exists()


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_past_the_check_transformers_refuses_instead_of_asking(tmp_path, answer_yes, capsys, monkeypatch, where):
    """Without the up-front check, ``trust_remote_code=False`` alone keeps the code from running, in one line."""
    monkeypatch.setattr(sources, "refuse_custom_code", lambda folder: None)
    folder = _custom_model(tmp_path / "evil", answer_yes, where)
    assert main(["collect", "--scenario", "chat", "--n", "1", "--model", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "declares custom code" in err and "[y/N]" not in err, err
    assert not answer_yes.exists()


def test_unreadable_config_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json of model .* is not readable JSON"):
        TargetModel.load(str(tmp_path))


@pytest.fixture
def recorded(monkeypatch):
    """The options of every ``from_pretrained`` call (tokenizers load a stand-in; models fail after recording)."""
    calls: list[tuple[str, dict]] = []

    def fake(kind, result):
        def from_pretrained(path, *args, **kwargs):
            calls.append((kind, kwargs))
            if isinstance(result, Exception):
                raise result
            return result
        return from_pretrained

    def install(model_result):
        monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake("tokenizer", object()))
        monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake("model", model_result))
        return calls

    return install


def test_every_from_pretrained_call_passes_the_safe_options(tmp_path, monkeypatch, recorded):
    calls = recorded(RuntimeError("stop here"))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "m.gguf").write_bytes(b"x")
    monkeypatch.setenv("LENSCOPE_GGUF_CACHE", "off")
    monkeypatch.setattr(sources, "hub_load_options", lambda repo_id: {})
    monkeypatch.chdir(tmp_path)
    for spec in (str(tmp_path / "ckpt"), str(tmp_path / "m.gguf"), "owner/name"):
        with pytest.raises(ValueError, match="could not load model"):
            TargetModel.load(spec)
    assert [kind for kind, _ in calls] == ["tokenizer", "model"] * 3
    for (_, tokenizer), (_, model) in zip(calls[::2], calls[1::2]):
        assert tokenizer["trust_remote_code"] is False and {k: v for k, v in model.items() if k != "dtype"} == tokenizer
    local, gguf, hub = calls[0][1], calls[2][1], calls[4][1]
    assert local == LOCAL_LOAD_OPTIONS and gguf == {**LOCAL_LOAD_OPTIONS, "gguf_file": "m.gguf"}
    assert hub == {"trust_remote_code": False}

    calls.clear()
    recorded(object())
    monkeypatch.setattr("lenscope.models.gguf_checkpoint.find_converted", lambda gguf: tmp_path / "ckpt")
    assert load_converted(tmp_path / "m.gguf", None) is not None
    assert sorted(kind for kind, _ in calls) == ["model", "tokenizer"]
    assert all({k: v for k, v in kwargs.items() if k != "dtype"} == LOCAL_LOAD_OPTIONS for _, kwargs in calls)


def test_every_from_pretrained_call_in_the_code_passes_options():
    """Each ``.from_pretrained(...)`` call in the project's code spreads an options dict (``**...``), so that a new
    call cannot forget them silently; the test above checks what those dicts hold."""
    bare = []
    for package in ("analysis", "models", "cache", "lenscope", "pages", "benchmarks"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "from_pretrained" and not any(k.arg is None for k in node.keywords)):
                    bare.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bare == []
