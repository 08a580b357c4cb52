"""Gradient attribution against finite differences and an independent autograd path; correlations."""

import numpy as np
import pytest
import torch

from lenscope.analysis.core.soft_label_head import SoftLabelHead, log_bins, normalized_mse
from lenscope.analysis.egtp.attribution import entropy_importance_correlation, model_importance, pooled_importance
from lenscope.analysis.egtp.pooling import entropy_weights


def _tiny_head(d: int = 5) -> SoftLabelHead:
    torch.manual_seed(0)
    head = SoftLabelHead(d, log_bins([5, 12, 30, 60, 100], k=5), hidden=7, dropout=0.0)
    head.fit_scaler(torch.randn(20, d))
    return head.eval()


@pytest.mark.parametrize("pooling", ["egtp", "mean", "max"])
def test_pooled_importance_matches_finite_differences(pooling):
    head = _tiny_head().double()
    hidden, entropy, y = torch.randn(6, 5, dtype=torch.float64), torch.rand(6) * 3, 40.0
    from lenscope.analysis.egtp.pooling import pool

    def loss(h):
        with torch.no_grad():
            return normalized_mse(head, head(pool(h, entropy, pooling)[None]), torch.tensor([y])).item()

    eps = 1e-6
    numeric = torch.zeros(6, 5, dtype=torch.float64)
    for t in range(6):
        for j in range(5):
            up, down = hidden.clone(), hidden.clone()
            up[t, j] += eps
            down[t, j] -= eps
            numeric[t, j] = (loss(up) - loss(down)) / (2 * eps)
    got = pooled_importance(head, hidden, entropy, y, pooling)
    assert torch.allclose(got, numeric.norm(dim=-1), rtol=1e-4, atol=1e-9)


def test_egtp_pooling_path_is_proportional_to_entropy_weights():
    head = _tiny_head()
    hidden, entropy = torch.randn(8, 5), torch.rand(8) * 3
    imp = pooled_importance(head, hidden, entropy, 50.0, "egtp")
    ratio = imp / entropy_weights(entropy)
    assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-4)


def test_model_path_matches_autograd_through_a_tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    head = _tiny_head(16)
    ids, entropy, y = torch.randint(0, 50, (9,)), torch.rand(9) * 2, 30.0
    got = model_importance(model, ids, head, entropy, y, head_layer=3, attr_layer=1, pooling="mean")

    out = model.model(input_ids=ids[None], output_hidden_states=True)
    h1 = out.hidden_states[1]
    h1.retain_grad()
    loss = normalized_mse(head, head(out.hidden_states[3][0].mean(0)[None]), torch.tensor([y]))
    loss.backward()
    expected = h1.grad[0].norm(dim=-1)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-10)
    assert got[:-1].std() > 0
    with pytest.raises(ValueError, match="below the head layer"):
        model_importance(model, ids, head, entropy, y, head_layer=2, attr_layer=2)


def test_correlation_counts_tokens_and_brackets_the_estimate():
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(12):
        h = rng.random(30) * 3
        runs.append((h, 2 * h + rng.normal(0, 1, 30)))
    corr = entropy_importance_correlation(runs, n_boot=200)
    assert corr.n_tokens == 360 and corr.n_runs == 12
    assert 0.6 < corr.pearson < 1 and corr.pearson_ci[0] <= corr.pearson <= corr.pearson_ci[1]
    assert corr.spearman_ci[0] <= corr.spearman <= corr.spearman_ci[1]
    flipped = entropy_importance_correlation([(h, -i) for h, i in runs], n_boot=50)
    assert flipped.pearson == pytest.approx(-corr.pearson)
