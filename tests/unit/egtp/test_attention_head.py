"""The attention-pooling head: a mean-pooling head before training, masked padding, weights that sum to 1."""

import pytest
import torch

from lenscope.analysis.core.soft_label_head import log_bins
from lenscope.analysis.egtp.attention_head import (
    AttentionPoolingHead,
    pack_runs,
    pad_runs,
    predict_runs,
    train_attention_head,
)
from lenscope.analysis.egtp.training import HeadConfig


def _runs(n: int = 6, d: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(3 + i % 4, d, generator=g) for i in range(n)]


def _head(runs: list[torch.Tensor]) -> AttentionPoolingHead:
    torch.manual_seed(0)
    head = AttentionPoolingHead(runs[0].shape[1], log_bins([5, 20, 80], k=4), hidden=8, dropout=0.0)
    head.fit_scaler(runs, torch.tensor([10.0, 20, 30, 40, 50, 60]))
    return head.eval()


def test_untrained_head_is_the_mean_pooling_head():
    runs = _runs()
    head = _head(runs)
    states, mask = pad_runs(runs)
    expected = head.output(torch.stack([r.mean(0) for r in runs]))
    assert torch.allclose(head(states, mask), expected, atol=1e-6)


def test_padding_gets_no_weight_and_does_not_change_a_run():
    runs = _runs()
    head = _head(runs)
    torch.nn.init.normal_(head.score.weight)
    states, mask = pad_runs(runs)
    weights = head.weights(states, mask)
    assert torch.allclose(weights.sum(1), torch.ones(len(runs)))
    assert (weights[~mask] == 0).all()
    alone = torch.cat([head(r[None]) for r in runs])
    assert torch.allclose(head(states, mask), alone, atol=1e-6)


def test_training_keeps_the_best_validation_epoch():
    runs = _runs(12)
    lengths = torch.tensor([float(10 + 40 * (r[:, 0].max() > 1)) for r in runs])
    cfg = HeadConfig(hidden=8, dropout=0.0, epochs=5, batch_size=4, seed=0)
    result = train_attention_head(runs[:8], lengths[:8], runs[8:], lengths[8:], cfg)
    assert isinstance(result.head, AttentionPoolingHead) and len(result.history) == 5
    maes = [row["val_mae"] for row in result.history]
    kept = float((predict_runs(result.head, runs[8:]) - lengths[8:]).abs().mean())
    assert kept == pytest.approx(min(maes)) and maes[result.best_epoch - 1] == min(maes)


@pytest.mark.parametrize("scorer", ["linear", "mlp"])
def test_packed_runs_give_the_padded_logits_and_gradients(scorer):
    runs = _runs()
    torch.manual_seed(0)
    head = AttentionPoolingHead(4, log_bins([5, 20, 80], k=4), hidden=8, dropout=0.0, scorer=scorer)
    head.fit_scaler(runs, torch.tensor([10.0, 20, 30, 40, 50, 60]))
    for p in head.score.parameters():
        torch.nn.init.normal_(p, std=3.0)  # large scores: the per-run shift must keep the softmax finite
    padded, packed = head(*pad_runs(runs)), head.packed(*pack_runs(runs))
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)
    grads = []
    for out in (padded, packed):
        head.zero_grad()
        out.square().sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in head.score.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    tokens, run_of = pack_runs(runs)
    assert tokens.shape[0] == run_of.shape[0] == sum(len(r) for r in runs)
    assert run_of.tolist() == sorted(run_of.tolist())
    with pytest.raises(ValueError, match="at least one token"):
        pack_runs([runs[0], runs[0][:0]])
