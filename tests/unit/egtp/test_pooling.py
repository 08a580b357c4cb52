"""Entropy-guided token pooling and the ablation poolings."""

import pytest
import torch

from lenscope.analysis.egtp.pooling import POOLINGS, entropy_weights, pool, prefix_pool


def test_weights_are_softmax_of_entropy_over_alpha():
    h = torch.tensor([0.5, 2.0, 1.0, 0.0])
    for alpha in (0.5, 1.0, 3.0):
        w = entropy_weights(h, alpha)
        assert torch.isclose(w.sum(), torch.tensor(1.0))
        assert torch.allclose(w, torch.exp(h / alpha) / torch.exp(h / alpha).sum())
    assert int(entropy_weights(h, 0.05).argmax()) == 1


def test_equal_entropies_give_mean_pooling():
    hidden = torch.randn(7, 5)
    assert torch.allclose(pool(hidden, torch.full((7,), 1.3), "egtp"), hidden.mean(0), atol=1e-6)
    assert torch.allclose(pool(hidden, torch.rand(7), "egtp", alpha=1e4), hidden.mean(0), atol=1e-3)


def test_ablation_poolings():
    hidden, entropy = torch.randn(6, 4), torch.rand(6)
    assert torch.equal(pool(hidden, entropy, "max"), hidden.max(0).values)
    assert torch.equal(pool(hidden, entropy, "last"), hidden[-1])
    assert torch.allclose(pool(hidden, entropy, "mean"), hidden.mean(0))


@pytest.mark.parametrize("method", POOLINGS)
def test_prefix_pool_rows_equal_pooling_of_each_prefix(method):
    hidden, entropy = torch.randn(9, 3), torch.rand(9) * 5
    rows = prefix_pool(hidden, entropy, method, alpha=0.7)
    for t in range(9):
        assert torch.allclose(rows[t], pool(hidden[:t + 1], entropy[:t + 1], method, 0.7), atol=1e-5)


def test_bad_arguments_are_user_errors():
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(torch.randn(3, 2), torch.rand(3), "attention")
    with pytest.raises(ValueError, match="alpha"):
        pool(torch.randn(3, 2), torch.rand(3), "egtp", alpha=0)
    with pytest.raises(ValueError, match="T > 0"):
        pool(torch.randn(3, 2), torch.rand(4))
