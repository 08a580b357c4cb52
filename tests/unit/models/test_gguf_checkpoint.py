"""Converted copies of GGUF files: where they live, that a changed GGUF gets a new copy, that a damaged copy is
deleted (the GGUF is parsed again), and that SmolLM2's copy tokenizes exactly as its GGUF does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lenscope.models.gguf_checkpoint import (
    CACHE_ENV,
    COMPLETE_MARK,
    converted_dir,
    find_converted,
    load_converted,
    save_converted,
)


class _Tokenizer:
    """Stands in for a tokenizer: ``save_pretrained`` writes one file."""

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer.json").write_text("{}")


@pytest.fixture
def gguf(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    return path


def _tiny_model() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def test_copies_are_kept_per_file_version_and_can_be_switched_off(gguf, monkeypatch):
    first = converted_dir(gguf)
    assert first.parent == Path(os.environ[CACHE_ENV]) and first.name.startswith("model-")
    os.utime(gguf, ns=(0, gguf.stat().st_mtime_ns + 10**9))  # a replaced file: a new copy
    assert converted_dir(gguf) != first
    monkeypatch.setenv(CACHE_ENV, "off")
    assert converted_dir(gguf) is None and save_converted(_tiny_model(), _Tokenizer(), gguf) is None


def test_a_saved_copy_is_complete_and_leaves_no_temporary_folder(gguf):
    model = _tiny_model()
    folder = save_converted(model, _Tokenizer(), gguf)
    assert folder == find_converted(gguf) and (folder / COMPLETE_MARK).is_file()
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]
    again = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = torch.tensor([[1, 5, 7, 3]])
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_an_unwritable_cache_leaves_nothing_and_the_gguf_is_used(gguf, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))
    assert save_converted(_tiny_model(), _Tokenizer(), gguf) is None
    assert find_converted(gguf) is None


def test_a_damaged_copy_is_deleted_so_the_gguf_is_parsed_again(gguf):
    folder = save_converted(_tiny_model(), _Tokenizer(), gguf)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # torn
    assert load_converted(gguf, torch.float32) is None
    assert not folder.exists() and find_converted(gguf) is None


@pytest.mark.model
def test_smollm2s_copy_tokenizes_exactly_as_its_gguf(target):
    """The session model comes from the converted copy (made by its first load); its tokenizer is compared with
    the one transformers builds from the GGUF itself, on text with unicode, code and the chat template."""
    gguf = Path(target.source.path) / target.source.gguf_file
    assert find_converted(gguf) is not None
    from_gguf = AutoTokenizer.from_pretrained(target.source.path, gguf_file=target.source.gguf_file)
    assert from_gguf.chat_template == target.tokenizer.chat_template
    assert from_gguf.all_special_tokens == target.tokenizer.all_special_tokens
    for text in ["Name a planet.", "Ünïcödé ✓ 日本語 — emoji 🙂\n\tdef f(x):\n        return x ** 2", "  spaces  "]:
        assert from_gguf(text)["input_ids"] == target.tokenizer(text)["input_ids"]
        messages = [{"role": "user", "content": text}]
        assert (from_gguf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                == target.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
