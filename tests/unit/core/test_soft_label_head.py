"""Soft labels, log-spaced bins, the joint loss and training of the soft-label head."""

import math

import numpy as np
import pytest
import torch

from lenscope.analysis.core.soft_label_head import SoftLabelHead, log_bins, normalized_mse, soft_label_loss, soft_labels
from lenscope.analysis.egtp.training import HeadConfig, load_head, predict, save_head, train_head


def test_soft_labels_match_formula():
    k = 6
    labels = soft_labels(torch.tensor([0, 3, 5]), k)
    for row, i in zip(labels, [0, 3, 5]):
        expected = [math.exp(-abs(j - i)) for j in range(k)]
        total = sum(expected)
        assert torch.allclose(row, torch.tensor([e / total for e in expected]), atol=1e-6)


def test_log_bins_cover_the_range_with_data_centres():
    y = np.array([3, 5, 8, 20, 50, 120, 256, 256, 256])
    bins = log_bins(y, k=5)
    assert bins.k == 5 and len(bins.inner_edges) == 4
    ratios = bins.inner_edges[1:] / bins.inner_edges[:-1]
    assert torch.allclose(ratios, ratios[0].expand_as(ratios), rtol=1e-4)
    idx = bins.index(torch.tensor(y, dtype=torch.float32))
    assert idx.min() == 0 and idx.max() == 4
    top = y[y >= float(bins.inner_edges[-1])]
    assert math.isclose(float(bins.centers[-1]), top.mean(), rel_tol=1e-6)
    assert torch.all(bins.centers[1:] > bins.centers[:-1])


def test_loss_is_lambda_mix_of_ce_and_normalised_mse():
    head = SoftLabelHead(4, log_bins([5, 10, 40, 100], k=4), hidden=8)
    logits, y = torch.randn(3, 4), torch.tensor([7.0, 30.0, 90.0])
    ce = soft_label_loss(head, logits, y, lam=1.0)
    mse = normalized_mse(head, logits, y)
    assert torch.isclose(soft_label_loss(head, logits, y, lam=0.0), mse)
    assert torch.isclose(soft_label_loss(head, logits, y, lam=0.95), 0.95 * ce + 0.05 * mse)
    assert mse < 1.0


def test_head_learns_a_synthetic_length_signal(tmp_path):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, 6, generator=gen)
    y = (60 + 45 * torch.tanh(x[:, 0])).round()
    res = train_head(x[:300], y[:300], x[300:350], y[300:350], HeadConfig(epochs=40, hidden=32))
    pred = predict(res.head, x[350:])
    model_mae = np.abs(pred - y[350:].numpy()).mean()
    baseline_mae = (y[350:] - y[:300].mean()).abs().mean().item()
    assert model_mae < 0.4 * baseline_mae, (model_mae, baseline_mae)
    path = save_head(res.head, tmp_path / "head.safetensors", {"note": "test"})
    loaded, meta = load_head(path)
    assert meta == {"note": "test"}
    assert np.allclose(predict(loaded, x[350:]), pred)


def test_mse_is_in_units_of_the_training_length_spread():
    """The constant-mean predictor has MSE 1 in the head's units, so lambda = 0.95 weighs comparable terms."""
    y = torch.tensor([20.0, 60.0, 100.0, 300.0, 520.0])
    head = SoftLabelHead(3, log_bins(y.numpy(), k=4), hidden=4)
    head.fit_scaler(torch.randn(5, 3), y)
    assert torch.isclose(head.length_scale, y.std(unbiased=False))
    logits = torch.log(torch.ones(5, 4) / 4)  # uniform distribution: predicts the mean of the bin centres
    centre_mean = head.centers.mean()
    expected = (((centre_mean - y) / y.std(unbiased=False)) ** 2).mean()
    assert torch.isclose(normalized_mse(head, logits, y), expected)


@pytest.mark.parametrize("bins_kind, architecture", [("linear", "mlp"), ("p1-p99", "official")])
def test_head_options_train_save_and_load(tmp_path, bins_kind, architecture):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(200, 8, generator=gen)
    y = (80 + 50 * torch.tanh(x[:, 0])).round()
    cfg = HeadConfig(epochs=30, hidden=16, bins_kind=bins_kind, architecture=architecture)
    res = train_head(x[:150], y[:150], x[150:175], y[150:175], cfg)
    pred = predict(res.head, x[175:])
    assert np.abs(pred - y[175:].numpy()).mean() < (y[175:] - y[:150].mean()).abs().mean().item()
    loaded, _ = load_head(save_head(res.head, tmp_path / "h.safetensors", {}))
    assert loaded.architecture == architecture and np.allclose(predict(loaded, x[175:]), pred)
    if architecture == "official":
        assert isinstance(loaded.net[1], torch.nn.LayerNorm) and loaded.net[0].out_features == 4
