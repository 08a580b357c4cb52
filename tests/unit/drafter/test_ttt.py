"""Training-time test (EAGLE-3) of the OUTLETS drafter and its reduced draft vocabulary."""

from __future__ import annotations

import pytest
import torch

from lenscope.analysis.drafter.training import (
    VARIANTS,
    draft_vocabulary,
    pad_batch,
    train_drafter,
    truncated_kl,
    ttt_kl,
)
from lenscope.models.drafter import Drafter
from tests.unit.drafter.test_drafter import V, synthetic_example, tiny_drafter


def _kl(drafter, batch, starts, steps: int) -> torch.Tensor:
    hidden, next_ids = pad_batch(batch)
    rep, kv = drafter(hidden, next_ids)
    return ttt_kl(drafter, rep, kv, batch, next_ids, starts, batch[0].length - 1 - starts, steps, 0.8)


def test_one_step_is_the_teacher_forced_kl_and_step_two_is_a_drafting_pass():
    drafter = tiny_drafter().eval()
    ex = synthetic_example(3)
    starts = torch.tensor([[2, 5, 9]])
    with torch.no_grad():
        one, two = _kl(drafter, [ex], starts, 1), _kl(drafter, [ex], starts, 2)
        hidden, next_ids = ex.inputs()
        rep, _ = drafter(hidden, next_ids)
        assert one == pytest.approx(float(truncated_kl(drafter.draft_logits(rep[0, starts[0]]),
                                                       ex.target_ids[starts[0] + 1], ex.target_logp[starts[0] + 1])))
        manual = []
        for p in starts[0].tolist():  # a causal pass whose last position holds the drafter's own representation
            feats = torch.cat([drafter.fuse_features([h[:, :p + 1] for h in hidden]), rep[:, p:p + 1]], dim=1)
            ids = torch.cat([next_ids[:, :p + 1], next_ids[:, p + 1:p + 2]], dim=1)
            rep2, _ = drafter.step(feats, ids, torch.arange(p + 2).unsqueeze(0))
            manual.append(truncated_kl(drafter.draft_logits(rep2[:, -1]), ex.target_ids[p + 2:p + 3],
                                       ex.target_logp[p + 2:p + 3]))
    assert (two * 1.8 - one) / 0.8 == pytest.approx(float(torch.stack(manual).mean()), rel=1e-4)


def test_steps_past_the_end_of_a_run_are_not_scored():
    drafter = tiny_drafter().eval()
    ex = synthetic_example(4)
    last = torch.tensor([[ex.length - 2]])           # only its first drafting step has a target
    with torch.no_grad():
        assert _kl(drafter, [ex], last, 4) == pytest.approx(float(_kl(drafter, [ex], last, 1)))


@pytest.mark.parametrize("variant", ["outlets", "no-decoder", "sd-only"])
def test_training_with_ttt_and_a_draft_vocabulary_reduces_the_loss(variant):
    spec = VARIANTS[variant]
    drafter = tiny_drafter(**spec.drafter_overrides(), draft_vocab_size=24)
    examples = [synthetic_example(i) for i in range(3)]
    history = train_drafter(drafter, examples, spec, epochs=25, lr=3e-3, warmup=1, ttt_steps=3)
    assert history[-1]["kl"] < 0.8 * history[0]["kl"]
    assert drafter.draft_ids.tolist() == draft_vocabulary(examples, 24, V).tolist()


def test_draft_vocabulary_kl_and_persistence(tmp_path):
    examples = [synthetic_example(i) for i in range(2)]
    vocab = draft_vocabulary(examples, 10, V)
    mass = torch.zeros(V)
    for ex in examples:
        mass.index_add_(0, ex.target_ids[ex.prompt_len - 1:].reshape(-1),
                        ex.target_logp[ex.prompt_len - 1:].float().exp().reshape(-1))
    assert set(vocab.tolist()) == set(mass.topk(10).indices.tolist())
    drafter = tiny_drafter(draft_vocab_size=10).eval()
    drafter.set_draft_vocab(vocab)
    assert drafter.draft_logits(torch.randn(3, drafter.config.hidden_size)).shape == (3, 10)
    # target tokens outside the draft vocabulary drop out of the KL; a row without any is left out
    ids = torch.tensor([[int(vocab[0]), int(vocab[1]), -1], [-1, -1, -1]])
    outside = next(t for t in range(V) if t not in vocab.tolist())
    ids = torch.where(ids < 0, torch.tensor(outside), ids)
    logp, logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.4, 0.3, 0.3]])), torch.randn(2, 10)
    q = torch.log_softmax(logits[0], -1)
    p = torch.tensor([0.5, 0.3]) / 0.8
    expected = (p * (p.log() - q[:2])).sum()
    assert float(truncated_kl(logits, ids, logp, drafter.draft_index)) == pytest.approx(float(expected), rel=1e-5)
    ex = synthetic_example(5)
    hidden, next_ids = ex.inputs()
    drafts = drafter.draft([h[0] for h in hidden], next_ids[0], torch.tensor([3, 6]), k=3)
    assert set(drafts.reshape(-1).tolist()) <= set(vocab.tolist())
    drafter.save(tmp_path / "d")
    loaded = Drafter.load(tmp_path / "d", drafter.embed_weight, drafter.head_weight)
    assert loaded.draft_ids.tolist() == vocab.tolist() and torch.equal(loaded.draft_index, drafter.draft_index)
