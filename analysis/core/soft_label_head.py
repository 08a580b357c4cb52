"""Soft-label distribution regression head (EGTP paper, design 2).

The length axis is cut into ``K`` bins. Bin edges are **log-spaced** between the smallest and the
largest training length, because output lengths are heavy-tailed: equal-width bins would spend most
bins on the rare long tail and squeeze short answers into one bin. (Quantile edges collapse when many
answers hit the ``max_new_tokens`` cap, so they are not used.) The outermost edges are open
(0 and infinity). Each bin's **centre** is the mean training length falling in it (the geometric
midpoint of its edges when empty), so a bin holding the runs truncated at the cap has its centre at the
cap, not below it.

A length ``y`` in bin ``i`` becomes the soft label ``p_j = exp(-|j - i|) / sum_k exp(-|k - i|)``. The
head outputs logits over the bins; the prediction is the expected bin centre
``y_hat = sum_j softmax(logits)_j c_j``. The loss is ``lambda * CE(p, p_hat) + (1 - lambda) * MSE``
with the MSE taken on lengths divided by the largest bin centre, so both terms are O(1) and the
0.05-weighted MSE term neither swamps nor vanishes next to CE (raw token units would make it ~1e4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class LengthBins:
    """Inner bin edges (K-1 values; the outer edges are 0 and infinity) and K bin centres."""

    inner_edges: torch.Tensor
    centers: torch.Tensor

    @property
    def k(self) -> int:
        return int(self.centers.shape[0])

    def index(self, lengths: torch.Tensor) -> torch.Tensor:
        """Bin index of each length."""
        return torch.bucketize(lengths.to(torch.float64), self.inner_edges.to(torch.float64), right=True)


def log_bins(lengths, k: int = 20) -> LengthBins:
    """``k`` log-spaced bins fitted to the training ``lengths`` (see the module docstring)."""
    y = np.asarray(lengths, dtype=np.float64)
    if k < 2:
        raise ValueError("need at least 2 bins")
    if y.size == 0 or (y <= 0).any():
        raise ValueError("need at least one training length, all positive")
    lo, hi = y.min(), max(y.max(), y.min() + 1.0)
    edges = np.geomspace(lo, hi, k + 1)
    inner = torch.tensor(edges[1:-1])
    idx = torch.bucketize(torch.tensor(y), inner, right=True).numpy()
    centers = np.sqrt(edges[:-1] * edges[1:])
    for j in range(k):
        if (idx == j).any():
            centers[j] = y[idx == j].mean()
    return LengthBins(inner.float(), torch.tensor(centers, dtype=torch.float32))


def soft_labels(index: torch.Tensor, k: int) -> torch.Tensor:
    """Soft label rows ``p_j = exp(-|j - i|) / sum_k exp(-|k - i|)`` for bin indices ``i`` ([B] -> [B, K])."""
    dist = (torch.arange(k)[None, :] - index.long()[:, None]).abs().float()
    return torch.softmax(-dist, dim=1)


class SoftLabelHead(nn.Module):
    """Standardise features, MLP to K logits; ``predict`` returns the expected bin centre (tokens)."""

    def __init__(self, in_dim: int, bins: LengthBins, hidden: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        self.register_buffer("feat_mean", torch.zeros(in_dim))
        self.register_buffer("feat_std", torch.ones(in_dim))
        self.register_buffer("inner_edges", bins.inner_edges.clone().float())
        self.register_buffer("centers", bins.centers.clone().float())
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, bins.k))

    @property
    def bins(self) -> LengthBins:
        return LengthBins(self.inner_edges, self.centers)

    @property
    def scale(self) -> torch.Tensor:
        """Length unit of the MSE term: the largest bin centre."""
        return self.centers.max()

    def fit_scaler(self, x: torch.Tensor) -> None:
        """Set the feature standardisation from training features."""
        self.feat_mean.copy_(x.mean(0))
        self.feat_std.copy_(x.std(0, unbiased=False).clamp_min(1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.feat_mean) / self.feat_std)

    def expected_length(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1) @ self.centers

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.expected_length(self(x))


def soft_label_loss(head: SoftLabelHead, logits: torch.Tensor, lengths: torch.Tensor,
                    lam: float = 0.95) -> torch.Tensor:
    """``lam * CE(soft labels, softmax(logits)) + (1 - lam) * MSE(y / scale, y_hat / scale)``."""
    target = soft_labels(head.bins.index(lengths), head.bins.k)
    ce = -(target * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
    return lam * ce + (1 - lam) * normalized_mse(head, logits, lengths)


def normalized_mse(head: SoftLabelHead, logits: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The head's MSE term: squared error of the expected length in units of the largest bin centre."""
    err = (head.expected_length(logits) - lengths.float()) / head.scale
    return (err ** 2).mean()
