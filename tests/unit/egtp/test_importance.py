"""Each importance measure against finite differences of the head's loss, on tiny heads in float64."""

import pytest
import torch

from lenscope.analysis.core.soft_label_head import SoftLabelHead, log_bins, normalized_mse
from lenscope.analysis.egtp.attention_head import AttentionPoolingHead
from lenscope.analysis.egtp.importance import head_importances
from lenscope.analysis.egtp.pooling import pool

BINS = log_bins([5, 12, 30, 60, 100], k=5)
Y, EPS = 40.0, 1e-6


def _attention_head(d: int = 3) -> AttentionPoolingHead:
    torch.manual_seed(0)
    head = AttentionPoolingHead(d, BINS, hidden=7, dropout=0.0)
    head.fit_scaler([torch.randn(5, d) for _ in range(6)], torch.tensor([10.0, 20, 30, 40, 50, 60]))
    torch.nn.init.normal_(head.score.weight)
    return head.double().eval()


def _pooled_head(d: int = 3) -> SoftLabelHead:
    torch.manual_seed(0)
    head = SoftLabelHead(d, BINS, hidden=7, dropout=0.0)
    head.fit_scaler(torch.randn(20, d))
    return head.double().eval()


def _loss(head, entropy: torch.Tensor, pooling: str):
    """The head's loss at states h [T, d], computed without autograd."""
    attention = isinstance(head, AttentionPoolingHead)

    def f(h: torch.Tensor) -> float:
        with torch.no_grad():
            logits = head(h[None]) if attention else head(pool(h, entropy, pooling)[None])
            return normalized_mse(head.output if attention else head, logits, torch.tensor([Y])).item()
    return f


def _scaled(h: torch.Tensor, t: int, factor: float) -> torch.Tensor:
    out = h.clone()
    out[t] = out[t] * factor
    return out


KINDS = ["attention", "mean", "egtp"]


def _setup(kind: str):
    torch.manual_seed(1)
    hidden, entropy = torch.randn(4, 3, dtype=torch.float64), torch.rand(4, dtype=torch.float64) * 3
    head = _attention_head() if kind == "attention" else _pooled_head()
    pooling = "mean" if kind == "attention" else kind
    return head, hidden, entropy, pooling, _loss(head, entropy, pooling)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_norm_matches_finite_differences(kind):
    head, hidden, entropy, pooling, f = _setup(kind)
    numeric = torch.zeros_like(hidden)
    for t in range(hidden.shape[0]):
        for j in range(hidden.shape[1]):
            up, down = hidden.clone(), hidden.clone()
            up[t, j] += EPS
            down[t, j] -= EPS
            numeric[t, j] = (f(up) - f(down)) / (2 * EPS)
    got = head_importances(head, hidden, entropy, Y, pooling)["gradient"]
    assert got == pytest.approx(numeric.norm(dim=-1).numpy(), rel=1e-5, abs=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_grad_x_act_is_the_derivative_of_scaling_one_token(kind):
    head, hidden, entropy, pooling, f = _setup(kind)
    numeric = [abs(f(_scaled(hidden, t, 1 + EPS)) - f(_scaled(hidden, t, 1 - EPS))) / (2 * EPS) for t in range(4)]
    got = head_importances(head, hidden, entropy, Y, pooling)["grad_x_act"]
    assert got == pytest.approx(numeric, rel=1e-5, abs=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_integrated_gradients_match_the_path_integral_from_zero(kind):
    """|int_0^1 <dL/dh_t(a h), h_t> da| by the midpoint rule, each integrand a finite difference."""
    head, hidden, entropy, pooling, f = _setup(kind)
    steps = 200
    numeric = []
    for t in range(4):
        total = 0.0
        for k in range(steps):
            a = (k + 0.5) / steps
            up, down = a * hidden, a * hidden
            up[t] += EPS * hidden[t]
            down[t] -= EPS * hidden[t]
            total += (f(up) - f(down)) / (2 * EPS) / steps
        numeric.append(abs(total))
    got = head_importances(head, hidden, entropy, Y, pooling, ig_steps=64)["integrated_gradients"]
    assert got == pytest.approx(numeric, rel=1e-3, abs=1e-8)


def test_attention_weights_are_the_softmax_of_the_standardised_score():
    head, hidden, entropy, _, _ = _setup("attention")
    v = head.score.weight[0].detach()
    expected = torch.softmax(((hidden - head.token_mean) / head.token_std) @ v, dim=0)
    got = head_importances(head, hidden, entropy, Y)["attention"]
    assert got == pytest.approx(expected.numpy(), rel=1e-10)
    assert got.sum() == pytest.approx(1.0)


def test_only_the_attention_head_has_attention_weights():
    head, hidden, entropy, pooling, _ = _setup("mean")
    assert set(head_importances(head, hidden, entropy, Y, pooling)) == {"gradient", "grad_x_act",
                                                                      "integrated_gradients"}
