"""Censored runs (the answer hit the token cap): the clipped MAE and the censoring-aware soft-label head."""

import math

import numpy as np
import pytest
import torch

from lenscope.analysis.core.metrics import clipped_errors, clipped_mae
from lenscope.analysis.core.soft_label_head import SoftLabelHead, log_bins, soft_label_loss
from lenscope.analysis.egtp.training import HeadConfig, predict, train_head


def test_clipped_errors_credit_predictions_at_or_above_the_cap():
    predicted = [90.0, 250.0, 300.0, 420.0]
    true = [100.0, 300.0, 300.0, 300.0]
    censored = [False, True, True, True]
    # finished |90 - 100|; censored below the cap by 50; at the cap and above it: right
    assert clipped_errors(predicted, true, censored, 300).tolist() == [10.0, 50.0, 0.0, 0.0]
    assert clipped_mae(predicted, true, censored, 300) == pytest.approx(15.0)
    # a finished row above the cap still scores its absolute error
    assert clipped_errors([500.0], [200.0], [False], 300).tolist() == [300.0]


def test_clipped_errors_take_a_cap_per_row():
    predicted, true = [100.0, 100.0, 700.0], [128.0, 1024.0, 512.0]
    censored = [True, True, False]
    caps = np.array([128.0, 1024.0, 1024.0])
    assert clipped_errors(predicted, true, censored, caps).tolist() == [28.0, 924.0, 188.0]


@pytest.mark.parametrize("predicted, true, censored, cap", [
    ([1.0], [1.0, 2.0], [False, False], 10),
    ([1.0, 2.0], [1.0, 2.0], [False], 10),
    ([], [], [], 10),
    ([1.0, 2.0], [1.0, 2.0], [False, True], [10.0, 10.0, 10.0]),
])
def test_clipped_errors_reject_mismatched_or_empty_shapes(predicted, true, censored, cap):
    with pytest.raises(ValueError, match="shape"):
        clipped_errors(predicted, true, censored, cap)


def _head() -> SoftLabelHead:
    # edges 5, 10.6, 22.4, 47.3, 100: centres 7.5 (5 and 10), 15.4 (empty: geometric midpoint), 40, 100
    return SoftLabelHead(3, log_bins([5, 10, 40, 100], k=4), hidden=4)


def test_censored_ce_is_minus_log_of_the_mass_at_and_above_the_caps_bin():
    head = _head()
    cap = 40.0
    assert int(head.bins.index(torch.tensor([cap]))) == 2
    logits = torch.tensor([[1.0, 0.5, -0.5, 0.2]])
    exp = [math.exp(v) for v in (1.0, 0.5, -0.5, 0.2)]
    tail_mass = (exp[2] + exp[3]) / sum(exp)
    ce = soft_label_loss(head, logits, torch.tensor([cap]), lam=1.0, censored=torch.tensor([True]))
    assert ce.item() == pytest.approx(-math.log(tail_mass), rel=1e-5)
    # all the mass at or above the cap's bin: nothing to learn
    sure = soft_label_loss(head, torch.tensor([[-40.0, -40.0, 30.0, 30.0]]), torch.tensor([cap]), lam=1.0,
                           censored=torch.tensor([True]))
    assert sure.item() == pytest.approx(0.0, abs=1e-6)


def test_censored_mse_is_one_sided():
    head = _head()
    cap, yes = torch.tensor([40.0]), torch.tensor([True])
    high = torch.tensor([[-30.0, -30.0, -30.0, 30.0]])  # y_hat ~ 100, above the cap
    assert soft_label_loss(head, high, cap, lam=0.0, censored=yes).item() == 0.0
    low = torch.tensor([[30.0, -30.0, -30.0, -30.0]])  # y_hat ~ 7.5, below the cap
    y_hat = head.expected_length(low)
    expected = ((cap - y_hat) / head.length_scale) ** 2
    assert torch.isclose(soft_label_loss(head, low, cap, lam=0.0, censored=yes), expected.squeeze())
    # a finished row of the same length is penalised on both sides
    assert soft_label_loss(head, high, cap, lam=0.0, censored=torch.tensor([False])).item() > 0.1


def test_censoring_mask_leaves_finished_rows_unchanged_and_averages_over_the_batch():
    head = _head()
    logits, y = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([7.0, 30.0, 40.0, 90.0])
    plain = soft_label_loss(head, logits, y)
    assert torch.isclose(soft_label_loss(head, logits, y, censored=torch.zeros(4, dtype=torch.bool)), plain)
    mask = torch.tensor([False, True, False, True])
    rows = [soft_label_loss(head, logits[i:i + 1], y[i:i + 1], censored=mask[i:i + 1]) for i in range(4)]
    assert torch.isclose(soft_label_loss(head, logits, y, censored=mask), torch.stack(rows).mean())
    assert torch.isclose(rows[0], soft_label_loss(head, logits[:1], y[:1]))


CAP = 300.0


def _censored_problem(seed: int = 0, n: int = 400):
    """Features N(0, 1) of dim 8; length exp(5 + x0) cut at CAP (about a quarter of the runs are censored)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    raw = torch.exp(5 + x[:, 0])
    return x, raw.clamp(max=CAP).round(), raw >= CAP


def test_aware_head_learns_from_censored_runs_that_drop_throws_away():
    x, y, c = _censored_problem()
    tr, va, te = slice(0, 240), slice(240, 300), slice(300, 400)
    cfg = {"epochs": 30, "hidden": 32, "seed": 42}
    # today's behaviour: censored runs left out of training and of validation
    fin_v = ~c[va]
    drop = train_head(x[tr], y[tr], x[va][fin_v], y[va][fin_v], HeadConfig(**cfg), censored_train=c[tr])
    aware = train_head(x[tr], y[tr], x[va], y[va], HeadConfig(**cfg, censoring="aware"),
                       censored_train=c[tr], censored_val=c[va])
    p_drop, p_aware = predict(drop.head, x[te]), predict(aware.head, x[te])
    cens, true = c[te].numpy(), y[te].numpy()
    assert cens.sum() >= 15
    # measured on this seed: censored rows 224 (drop) vs 271 (aware); clipped MAE 35.0 vs 21.6
    assert p_aware[cens].mean() > p_drop[cens].mean() + 20, (p_aware[cens].mean(), p_drop[cens].mean())
    mae_drop, mae_aware = clipped_mae(p_drop, true, cens, CAP), clipped_mae(p_aware, true, cens, CAP)
    assert mae_aware < 0.8 * mae_drop, (mae_aware, mae_drop)


def test_drop_with_a_mask_trains_on_the_finished_rows_only():
    x, y, c = _censored_problem(n=60)
    cfg = HeadConfig(epochs=3, hidden=8)
    masked = predict(train_head(x, y, config=cfg, censored_train=c).head, x)
    finished = predict(train_head(x[~c], y[~c], config=cfg).head, x)
    assert np.allclose(masked, finished)


def test_censoring_option_errors():
    x, y, c = _censored_problem(n=20)
    with pytest.raises(ValueError, match="censored_train"):
        train_head(x, y, config=HeadConfig(epochs=1, censoring="aware"))
    with pytest.raises(ValueError, match="censoring must be one of"):
        train_head(x, y, config=HeadConfig(epochs=1, censoring="keep"), censored_train=c)
