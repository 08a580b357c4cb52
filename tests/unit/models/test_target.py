"""The real embedded target: one-pass features, entropy from logits, and live generation through the engine."""

import numpy as np
import pytest
import torch

from lenscope.models.engine import GenerationSettings, generate
from lenscope.models.logits import summarize_logits


def test_model_shape(target):
    assert target.num_layers == 30 and target.hidden_size == 576
    assert target.default_layers() == [2, 15, 27, 30]
    assert target.device.type in {"cpu", "cuda"}
    assert target.tokenizer.convert_tokens_to_ids("<|im_end|>") in target.stop_ids


def test_entropy_equals_direct_computation_from_logits(target):
    ids = target.chat_ids("Name three colours.")
    feats = target.sequence_features(ids)
    with torch.no_grad():
        logits = target.model(torch.tensor([ids])).logits[0].double().numpy()
    shifted = logits - logits.max(-1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    direct = -(p * np.log(np.clip(p, 1e-300, None))).sum(-1)
    np.testing.assert_allclose(feats.entropy.numpy(), direct, rtol=1e-4, atol=1e-4)
    assert feats.tokens[0] == target.tokenizer.decode([ids[0]])
    assert set(feats.hidden) == {2, 15, 27, 30}
    assert all(h.shape == (len(ids), 576) for h in feats.hidden.values())
    np.testing.assert_allclose(feats.topk_probs[:, 0].numpy(), p.max(-1), rtol=1e-4, atol=1e-5)


def test_summarize_logits_on_uniform_and_peaked():
    uniform = summarize_logits(torch.zeros(1, 8), k=3)
    assert uniform.entropy.item() == pytest.approx(np.log(8), rel=1e-6)
    peaked = summarize_logits(torch.tensor([[100.0, 0, 0, 0]]), k=2)
    assert peaked.entropy.item() < 1e-6 and peaked.topk_ids[0, 0].item() == 0


def test_generation_records_every_position_consistently(target):
    settings = GenerationSettings(max_new_tokens=12, temperature=0.7, seed=3)
    gen = generate(target, "Write one short sentence about cats.", settings, layers=[15, 30])
    n = gen.prompt_len + gen.output_length
    assert len(gen.features) == n and gen.features.entropy.shape == (n,)
    assert gen.features.hidden[15].shape == (n, 576)
    assert 1 <= gen.output_length <= 12
    assert gen.finished == (gen.output_ids[-1] in target.stop_ids)
    one_pass = target.sequence_features(gen.features.input_ids.tolist(), layers=[15, 30])
    torch.testing.assert_close(one_pass.entropy, gen.features.entropy, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(one_pass.hidden[30], gen.features.hidden[30], atol=2e-3, rtol=1e-3)
    again = generate(target, "Write one short sentence about cats.", settings, layers=[15, 30])
    assert again.output_ids == gen.output_ids


def test_greedy_generation_stops_at_end_of_turn(target):
    gen = generate(target, "What is the capital of France? Answer in one word.",
                          GenerationSettings(max_new_tokens=40, temperature=0.0))
    assert gen.finished and gen.output_ids[-1] in target.stop_ids
    assert "Paris" in gen.text and "<|im_end|>" not in gen.text


def test_bad_inputs_are_clear_errors(target):
    with pytest.raises(ValueError, match="empty"):
        target.chat_ids("   ")
    with pytest.raises(ValueError, match="binary"):
        target.chat_ids("PK\x03\x04\x00\x00 zip bytes")
    with pytest.raises(ValueError, match="context"):
        target.chat_ids("word " * 9000)
    with pytest.raises(ValueError, match="outside"):
        target.prompt_features("hi", layers=[31])
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(target, "hi", GenerationSettings(max_new_tokens=0))
