"""The batched engine on the embedded model: features equal a single-sequence forward pass, greedy answers
equal plain greedy decoding, and an answer depends only on (prompt, seed), not on the batch around it."""

import pytest
import torch

from lenscope.models.engine import BatchedEngine, GenerationSettings, auto_batch_size

PROMPTS = ["Name three colours.", "Write a haiku about the sea.", "What is 2 + 2?",
           "Explain in two sentences why the sky is blue, for a child who asks at bedtime.",
           "List the planets of the solar system in order from the sun.", "Say hi."]


def _run(target, prompts, settings, **kwargs):
    engine = BatchedEngine(target, **kwargs)
    ids = [target.chat_ids(p) for p in prompts]
    return ids, dict(engine.run(ids, settings))


def test_features_equal_a_single_sequence_forward_pass(target):
    settings = [GenerationSettings(20, 0.8, 1.0, seed=i) for i in range(len(PROMPTS))]
    ids, out = _run(target, PROMPTS, settings, batch_size=4, refill=1)
    for i, gen in out.items():
        seq = ids[i] + gen.output_ids
        assert len(gen.features) == len(seq) and gen.features.input_ids.tolist() == seq
        with torch.no_grad():
            ref = target.model(torch.tensor([seq]), output_hidden_states=True)
        logp = torch.log_softmax(ref.logits[0].float(), -1)
        entropy = -(logp.exp() * logp).sum(-1)
        assert (gen.features.entropy - entropy).abs().max() < 1e-3
        assert torch.equal(gen.features.topk_ids[:, 0], logp.argmax(-1))
        for layer in target.default_layers():
            want = ref.hidden_states[layer][0]
            rel = (gen.features.hidden[layer] - want).norm(dim=-1) / want.norm(dim=-1)
            assert rel.max() < 1e-3, layer


def test_teacher_forced_features_equal_decode_features(target):
    settings = [GenerationSettings(12, 0.7, 1.0, seed=5)] * 3
    _, decode = _run(target, PROMPTS[:3], settings, batch_size=3)
    _, teacher = _run(target, PROMPTS[:3], settings, batch_size=2, features="teacher")
    for i in decode:
        assert decode[i].output_ids == teacher[i].output_ids
        torch.testing.assert_close(decode[i].features.entropy, teacher[i].features.entropy, atol=1e-3, rtol=0)
        torch.testing.assert_close(decode[i].features.hidden[15], teacher[i].features.hidden[15],
                                   atol=1e-2, rtol=1e-3)


def test_greedy_answers_equal_plain_greedy_decoding(target):
    settings = [GenerationSettings(24, 0.0)] * 4
    ids, out = _run(target, PROMPTS[:4], settings, batch_size=4, features="none")
    for i, gen in out.items():
        with torch.no_grad():
            plain = target.model.generate(torch.tensor([ids[i]]), max_new_tokens=24, do_sample=False,
                                          eos_token_id=sorted(target.stop_ids), pad_token_id=0)
        assert gen.output_ids == plain[0, len(ids[i]):].tolist()


def test_answer_depends_only_on_prompt_and_seed(target):
    settings = [GenerationSettings(16, 1.0, 0.95, seed=7 + i) for i in range(len(PROMPTS))]
    _, crowded = _run(target, PROMPTS, settings, batch_size=3, refill=1)
    _, alone = _run(target, PROMPTS[2:3], settings[2:3], batch_size=1)
    _, other = _run(target, PROMPTS[::-1], settings[::-1], batch_size=6)
    assert crowded[2].output_ids == alone[0].output_ids
    n = len(PROMPTS)
    assert all(crowded[i].output_ids == other[n - 1 - i].output_ids for i in range(n))
    assert len({tuple(g.output_ids) for g in crowded.values()}) > 1


def test_cancel_from_progress_and_bad_arguments(target):
    engine = BatchedEngine(target, batch_size=2)

    def cancel(stats):
        if stats.steps == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        list(engine.run([target.chat_ids("Tell me a story.")], [GenerationSettings(50)], on_step=cancel))
    with pytest.raises(ValueError, match="batch_size"):
        list(BatchedEngine(target, batch_size=0).run([[1, 2]], [GenerationSettings(4)]))
    with pytest.raises(ValueError, match="features"):
        BatchedEngine(target, features="logits")
    with pytest.raises(ValueError, match="max_new_tokens"):
        list(engine.run([[1, 2]], [GenerationSettings(0)]))
    assert 1 <= auto_batch_size(target, 2048, 4) <= 64


def test_inverse_cdf_draws_follow_the_distribution_and_skip_zero_mass():
    from lenscope.models.engine import _inverse_cdf
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2]]).repeat(20000, 1)
    draws = _inverse_cdf(probs, torch.rand(20000, generator=torch.Generator().manual_seed(0)))
    counts = torch.bincount(draws, minlength=5).float() / 20000
    assert counts[0] == 0 and counts[2] == 0
    assert torch.allclose(counts, probs[0], atol=0.015)
    edge = _inverse_cdf(torch.tensor([[0.25, 0.75, 0.0]]), torch.tensor([0.999999]))
    assert int(edge) == 1


def test_admission_follows_request_order_sorting_only_within_windows():
    from lenscope.models.engine import sorted_within_windows
    assert sorted_within_windows([5, 1, 4, 9, 2, 7], window=3) == [1, 2, 0, 4, 5, 3]
    assert sorted_within_windows([], window=4) == []
