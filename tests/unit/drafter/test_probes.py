"""TRAIL-style MLP probes: they learn a synthetic length signal and persist."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lenscope.analysis.core.metrics import mae
from lenscope.analysis.drafter.probes import LengthProbe, ProbeConfig, remaining_length_samples, train_probe


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states whose first two coordinates encode log(remaining), plus noise dimensions."""
    gen = torch.Generator().manual_seed(seed)
    remaining = torch.randint(1, 400, (n,), generator=gen).float()
    x = torch.randn(n, 16, generator=gen) * 3 + 5
    x[:, 0] = torch.log1p(remaining) * 2 + 0.1 * torch.randn(n, generator=gen)
    x[:, 1] = -x[:, 0] + 0.1 * torch.randn(n, generator=gen)
    return x, remaining


@pytest.mark.parametrize("mode", ["regression", "classification"])
def test_probe_beats_constant_mean_on_synthetic_signal(mode):
    x, rem = synthetic(1500, seed=0)
    x_test, rem_test = synthetic(400, seed=1)
    probe = train_probe(x, rem, ProbeConfig(in_dim=16, layer=7, mode=mode), epochs=40, lr=3e-3)
    predicted = probe.predict(x_test)
    assert predicted.shape == rem_test.shape and (predicted >= 0).all()
    baseline = mae(np.full(len(rem_test), float(rem.mean())), rem_test.numpy())
    assert mae(predicted.numpy(), rem_test.numpy()) < 0.5 * baseline


def test_probe_save_load_round_trip(tmp_path):
    x, rem = synthetic(200, seed=2)
    probe = train_probe(x, rem, ProbeConfig(in_dim=16, layer=3, mode="classification", n_bins=20), epochs=2)
    loaded = LengthProbe.load(probe.save(tmp_path / "p"))
    assert loaded.config == probe.config
    assert torch.allclose(loaded.predict(x), probe.predict(x))


def test_probe_rejects_empty_training_set():
    with pytest.raises(ValueError, match="no training samples"):
        train_probe(torch.zeros(0, 4), torch.zeros(0), ProbeConfig(in_dim=4, layer=0))


def test_remaining_length_samples_edge_cases():
    assert len(remaining_length_samples(10, 0).steps) == 0
    capped = remaining_length_samples(3, 50, max_step=5)
    assert capped.steps.tolist() == list(range(6)) and capped.remaining[0] == 50
