"""Quantiles of a soft-label head's bin distribution (``bin_quantiles``): the CDF is linear inside each bin and the
open outer bins are closed as wide outside their centre as inside it, so hand-made bins give exact numbers."""

import numpy as np
import pytest
import torch

from lenscope.analysis.core.soft_label_head import LengthBins, bin_quantiles

# Inner edges 10, 20, 30 and centres in the middle of each bin: the closed edges are 0, 10, 20, 30, 40.
BINS = LengthBins(torch.tensor([10.0, 20.0, 30.0]), torch.tensor([5.0, 15.0, 25.0, 35.0]))


def one_hot(k: int, n: int = 4) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor([k]), n).float()


def test_uniform_mass_gives_quantiles_linear_over_the_closed_range():
    q = bin_quantiles(torch.full((1, 4), 0.25), BINS, (0.1, 0.25, 0.5, 0.9))
    assert q.shape == (1, 4)
    np.testing.assert_allclose(q[0], [4.0, 10.0, 20.0, 36.0], atol=1e-9)


@pytest.mark.parametrize(("k", "expected"), [(0, [1.0, 5.0, 9.0]), (1, [11.0, 15.0, 19.0]),
                                             (2, [21.0, 25.0, 29.0]), (3, [31.0, 35.0, 39.0])])
def test_one_hot_mass_spreads_the_quantiles_over_that_bin(k, expected):
    np.testing.assert_allclose(bin_quantiles(one_hot(k), BINS, (0.1, 0.5, 0.9))[0], expected, atol=1e-9)


def test_outer_bins_are_closed_symmetrically_about_their_centres_and_never_below_zero():
    skewed = LengthBins(torch.tensor([10.0, 20.0, 30.0]), torch.tensor([8.0, 15.0, 25.0, 32.0]))
    # first bin: [2*8 - 10, 10] = [6, 10]; last bin: [30, 2*32 - 30] = [30, 34]
    np.testing.assert_allclose(bin_quantiles(one_hot(0), skewed, (0.5, 1.0))[0], [8.0, 10.0], atol=1e-9)
    np.testing.assert_allclose(bin_quantiles(one_hot(3), skewed, (0.25, 0.5, 1.0))[0], [31.0, 32.0, 34.0], atol=1e-9)
    low = LengthBins(torch.tensor([10.0, 20.0]), torch.tensor([3.0, 15.0, 25.0]))  # 2*3 - 10 < 0: closed at 0
    np.testing.assert_allclose(bin_quantiles(one_hot(0, 3), low, (0.1, 0.5))[0], [1.0, 5.0], atol=1e-9)


def test_empty_bins_between_masses_are_skipped():
    probs = torch.tensor([[0.5, 0.0, 0.0, 0.5]])
    np.testing.assert_allclose(bin_quantiles(probs, BINS, (0.25, 0.5, 0.75))[0], [5.0, 10.0, 35.0], atol=1e-9)


def test_rows_are_independent_and_float32_mass_that_misses_one_is_closed_at_the_top():
    probs = torch.cat([one_hot(1), torch.full((1, 4), 0.25), torch.tensor([[0.1, 0.2, 0.3, 0.3999]])])
    q = bin_quantiles(probs, BINS, (0.5, 1.0))
    np.testing.assert_allclose(q[:2], [[15.0, 20.0], [20.0, 40.0]], atol=1e-9)
    assert q[2, 1] == pytest.approx(40.0)  # the CDF ends at 1 even when the row sums to 0.9999


def test_quantiles_are_monotone_in_the_level_and_invert_the_piecewise_linear_cdf():
    gen = torch.Generator().manual_seed(0)
    bins = LengthBins(torch.tensor([4.0, 9.0, 20.0, 45.0, 100.0, 220.0]),
                      torch.tensor([2.5, 6.0, 14.0, 30.0, 70.0, 150.0, 300.0]))
    probs = torch.softmax(torch.randn(50, 7, generator=gen) * 2, dim=-1)
    levels = tuple(np.linspace(0.05, 0.95, 19))
    q = bin_quantiles(probs, bins, levels)
    assert q.shape == (50, 19) and np.isfinite(q).all()
    assert (np.diff(q, axis=1) >= -1e-9).all()
    edges = np.array([1.0, 4, 9, 20, 45, 100, 220, 380])  # closed at 2*2.5 - 4 = 1 and 2*300 - 220 = 380
    assert q.min() >= edges[0] and q.max() <= edges[-1]
    for row, p in zip(q, probs.double().numpy()):
        cdf = np.concatenate([[0.0], np.cumsum(p)])
        np.testing.assert_allclose(np.interp(row, edges, cdf), levels, atol=1e-6)
