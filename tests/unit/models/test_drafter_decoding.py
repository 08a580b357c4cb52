"""Live speculative decoding is lossless: identical to greedy decoding at T = 0, the target's distribution at
T > 0 (chi-square on a tiny random model, and the same test rejects a broken acceptance rule)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig, LlamaForCausalLM

import lenscope.models.drafter_decoding as sd
from lenscope.models.drafter import Drafter, DrafterConfig
from lenscope.models.drafter_decoding import SpeculativeDecoder, plain_decode, verify
from lenscope.models.target import TargetModel

V = 6
PROMPT = [1, 2, 3]


def tiny_target(stop_ids=(), sharpen: float = 10.0) -> TargetModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)  # peaked, context-dependent target distributions
    tokenizer = SimpleNamespace(eos_token_id=None, unk_token_id=None, convert_tokens_to_ids=lambda token: None)
    target = TargetModel(model, tokenizer, SimpleNamespace(spec="tiny", gguf_file=None), "float32")
    target.stop_ids = set(stop_ids)
    return target


def tiny_drafter(target: TargetModel, draft_vocab: list[int] | None = None) -> Drafter:
    torch.manual_seed(1)
    config = DrafterConfig(hidden_size=16, vocab_size=V, fuse_layers=[1, 2, 3], num_heads=4, intermediate_size=32,
                           draft_vocab_size=len(draft_vocab or []))
    drafter = Drafter(config, target.model.get_input_embeddings().weight.detach(),
                      target.model.get_output_embeddings().weight.detach())
    if draft_vocab:
        drafter.set_draft_vocab(torch.tensor(draft_vocab))
    return drafter.eval()


@pytest.mark.parametrize("k, draft_vocab", [(1, None), (3, None), (4, [0, 2, 3, 5])])
def test_greedy_speculative_output_is_plain_greedy_decoding(k, draft_vocab):
    target = tiny_target(stop_ids={0})
    decoder = SpeculativeDecoder(target, tiny_drafter(target, draft_vocab), k=k, watch_layer=2)
    lengths = []
    for prompt in ([1, 2, 3], [5, 0], [2, 2, 2, 1, 0], [0, 3]):
        plain = plain_decode(target, prompt, 14)
        spec = decoder.generate(prompt, 14)
        assert spec.tokens == plain.tokens and spec.finished == plain.finished
        assert len(spec.tokens) == 1 + sum(len(c.tokens) for c in spec.cycles)
        assert all(c.accepted <= k and len(c.drafts) == k for c in spec.cycles)
        done = np.cumsum([0] + [len(c.tokens) for c in spec.cycles])
        assert [c.step for c in spec.cycles] == done[:-1].tolist()  # tokens generated before each cycle's x[n]
        assert all(c.watched.shape == (16,) and c.length >= 0 for c in spec.cycles)
        if draft_vocab:
            assert {t for c in spec.cycles for t in c.drafts} <= set(draft_vocab)
        lengths.append(len(spec.tokens))
    assert max(lengths) == 14 and min(lengths) < 14          # some stop at the stop token, some at the budget


class OracleDecoder(SpeculativeDecoder):
    """Drafts the known greedy continuation, with every third cycle's second draft wrong: the target's cache must
    roll back over rejected drafts and keep accepted ones."""

    def __init__(self, target, drafter, k, prompt_len, reference):
        super().__init__(target, drafter, k)
        self.prompt_len, self.reference, self.calls = prompt_len, reference, 0

    def _draft_chain(self, rep, position, past, temperature, generator):
        start = position + 2 - self.prompt_len                       # index of x[n+1] among generated tokens
        drafts = (self.reference[start:] + [0] * self.k)[:self.k]
        self.calls += 1
        if self.calls % 3 == 0:
            drafts[1] = (drafts[1] + 1) % V
        return drafts, sd.probabilities(torch.zeros(self.k, V), 0.0)


def test_greedy_decoding_keeps_accepted_drafts_and_rolls_back_rejected_ones():
    target = tiny_target()
    reference = plain_decode(target, [5, 0], 20).tokens
    spec = OracleDecoder(target, tiny_drafter(target), 3, 2, reference).generate([5, 0], 20)
    assert spec.tokens == reference
    accepted = [c.accepted for c in spec.cycles]
    assert 3 in accepted and 1 in accepted and len(spec.cycles) < 10


def test_verify_rule_on_known_distributions():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = torch.tensor([[1.0, 0.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    outcomes = [verify(p, q, [0], False, gen) for _ in range(4000)]
    accepted = np.mean([a for a, _ in outcomes])
    assert accepted == pytest.approx(0.5, abs=0.03)               # min(1, 0.5 / 1.0)
    assert {t for a, t in outcomes if a == 0} == {1}               # residual max(0, p - q) is all on token 1
    assert verify(p, q, [0], True, gen) == (1, 2)                  # greedy: 0 is an argmax of p[0]; bonus argmax p[1]
    assert verify(p, q, [1], True, gen) == (0, 0)


def exact_sequence_probabilities(target: TargetModel, prompt: list[int], n: int, temperature: float) -> dict:
    """P(x_1..x_n | prompt) of every continuation, from teacher-forced target passes."""
    sequences = [list(s) for s in itertools.product(range(V), repeat=n)]
    ids = torch.tensor([prompt + s for s in sequences])
    with torch.no_grad():
        logp = torch.log_softmax(target.model(input_ids=ids).logits.float() / temperature, dim=-1)
    probs = {}
    for row, seq in enumerate(sequences):
        probs[tuple(seq)] = float(sum(logp[row, len(prompt) - 1 + i, t] for i, t in enumerate(seq)).exp())
    return probs


def chi_square_p_value(target: TargetModel, drafter: Drafter, samples: int, temperature: float = 1.0) -> float:
    """Chi-square goodness of fit of speculative samples of 3 tokens (k = 2) to the target's exact distribution
    (cells with an expected count under 5 pooled)."""
    decoder = SpeculativeDecoder(target, drafter, k=2)
    counts: dict[tuple, int] = {}
    for seed in range(samples):
        key = tuple(decoder.generate(PROMPT, 3, temperature, seed).tokens)
        counts[key] = counts.get(key, 0) + 1
    exact = exact_sequence_probabilities(target, PROMPT, 3, temperature)
    expected = np.array([exact[s] * samples for s in exact])
    observed = np.array([counts.get(s, 0) for s in exact])
    small = expected < 5
    expected = np.append(expected[~small], expected[small].sum())
    observed = np.append(observed[~small], observed[small].sum())
    return float(chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


def test_sampled_output_has_the_target_distribution():
    target = tiny_target()
    assert chi_square_p_value(target, tiny_drafter(target, [0, 1, 3, 4]), samples=300) > 1e-3


def test_chi_square_rejects_an_acceptance_rule_that_always_accepts(monkeypatch):
    target = tiny_target()
    monkeypatch.setattr(sd, "verify", lambda p, q, drafts, greedy, generator: (len(drafts), int(p[-1].argmax())))
    assert chi_square_p_value(target, tiny_drafter(target, [0, 1, 3, 4]), samples=300) < 1e-3


def test_greedy_speculative_decoding_of_the_embedded_model(target):
    drafter = Drafter.for_target(target, draft_vocab_size=2048).eval()
    ids = target.chat_ids("Name three colours.")
    plain = plain_decode(target, ids, 12)
    spec = SpeculativeDecoder(target, drafter, k=3).generate(ids, 12)
    assert spec.tokens == plain.tokens
