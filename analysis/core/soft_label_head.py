"""Soft-label distribution regression head (EGTP paper, design 2).

The length axis is cut into ``K`` bins. Bin edges are **log-spaced** between the smallest and the
largest training length, because output lengths are heavy-tailed: equal-width bins would spend most
bins on the rare long tail and squeeze short answers into one bin. (Quantile edges collapse when many
answers hit the ``max_new_tokens`` cap, so they are not used.) The outermost edges are open
(0 and infinity). Each bin's **centre** is the mean training length falling in it (the geometric
midpoint of its edges when empty), so a bin holding the runs truncated at the cap has its centre at the
cap, not below it.

Two alternatives are measured in the ablation: ``linear`` bins (equal width between the smallest and
largest training length) and ``p1-p99`` bins (equal width between the 1st and 99th percentiles, as a public
reimplementation note, unverified, quotes the official head).

A length ``y`` in bin ``i`` becomes the soft label ``p_j = exp(-|j - i|) / sum_k exp(-|k - i|)``. The
head outputs logits over the bins; the prediction is the expected bin centre
``y_hat = sum_j softmax(logits)_j c_j``. The loss is the paper's ``lambda * CE(p, p_hat) + (1 - lambda) *
MSE(y, y_hat)`` with ``lambda = 0.95``. The paper does not say in which units the MSE is taken; here it is
in units of the training lengths' standard deviation (``length_scale``), so the MSE of the constant-mean
predictor is 1, the same order as the CE, and ``lambda`` weighs two comparable terms (5% MSE). Raw token
units would make the MSE ~1e4 and the CE irrelevant; dividing by the largest bin centre, as lenscope did
before, left the MSE term at under 1% of the gradient.

**Censoring-aware variant.** A run that hit the token cap ``c`` is censored: its length is only known to be
``>= c``. Passing ``censored`` to :func:`soft_label_loss` keeps such rows in the loss with what is known: the
CE term is the cross-entropy of the event "length at or above the cap", ``-log sum_{j >= bin(c)} p_hat_j``, and
the MSE term is one-sided, ``relu(c - y_hat)^2 / s^2`` (no penalty at or above the cap); finished rows are
scored as above, with the same ``lambda``. The bins are then fitted on all training lengths (a censored row
contributes its cap), so the top bin reaches the cap.
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


def linear_bins(lengths, k: int = 20, lo_q: float = 0.0, hi_q: float = 1.0) -> LengthBins:
    """``k`` equal-width bins between quantiles ``lo_q`` and ``hi_q`` of the training ``lengths`` (outer
    edges open); centres are the mean training length in each bin (the midpoint when empty)."""
    y = np.asarray(lengths, dtype=np.float64)
    if k < 2:
        raise ValueError("need at least 2 bins")
    if y.size == 0:
        raise ValueError("need at least one training length")
    lo, hi = np.quantile(y, lo_q), np.quantile(y, hi_q)
    edges = np.linspace(lo, max(hi, lo + 1.0), k + 1)
    inner = torch.tensor(edges[1:-1])
    idx = torch.bucketize(torch.tensor(y), inner, right=True).numpy()
    centers = (edges[:-1] + edges[1:]) / 2
    for j in range(k):
        if (idx == j).any():
            centers[j] = y[idx == j].mean()
    return LengthBins(inner.float(), torch.tensor(centers, dtype=torch.float32))


BINNINGS = {"log": log_bins, "linear": linear_bins,
            "p1-p99": lambda lengths, k=20: linear_bins(lengths, k, 0.01, 0.99)}
ARCHITECTURES = ("mlp", "official")


def soft_labels(index: torch.Tensor, k: int) -> torch.Tensor:
    """Soft label rows ``p_j = exp(-|j - i|) / sum_k exp(-|k - i|)`` for bin indices ``i`` ([B] -> [B, K])."""
    dist = (torch.arange(k)[None, :] - index.long()[:, None]).abs().float()
    return torch.softmax(-dist, dim=1)


class SoftLabelHead(nn.Module):
    """Standardise features, then K logits; ``predict`` returns the expected bin centre (tokens).

    ``architecture``: ``mlp`` (Linear(d, hidden) -> GELU -> Dropout -> Linear(hidden, K)) or ``official``
    (Linear(d, d/2) -> LayerNorm -> ReLU -> Dropout(0.1) -> Linear(d/2, K), as quoted by a public
    reimplementation note of the paper's code; unverified)."""

    def __init__(self, in_dim: int, bins: LengthBins, hidden: int = 256, dropout: float = 0.1,
                 architecture: str = "mlp") -> None:
        super().__init__()
        if architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {ARCHITECTURES}, not {architecture!r}")
        self.architecture = architecture
        self.register_buffer("feat_mean", torch.zeros(in_dim))
        self.register_buffer("feat_std", torch.ones(in_dim))
        self.register_buffer("inner_edges", bins.inner_edges.clone().float())
        self.register_buffer("centers", bins.centers.clone().float())
        self.register_buffer("length_scale", bins.centers.max().clone().float())
        if architecture == "official":
            half = max(1, in_dim // 2)
            self.net = nn.Sequential(nn.Linear(in_dim, half), nn.LayerNorm(half), nn.ReLU(), nn.Dropout(0.1),
                                     nn.Linear(half, bins.k))
        else:
            self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Dropout(dropout),
                                     nn.Linear(hidden, bins.k))

    @property
    def bins(self) -> LengthBins:
        return LengthBins(self.inner_edges, self.centers)

    def fit_scaler(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> None:
        """Set the feature standardisation from training features and, given the training lengths, the MSE
        unit (their standard deviation)."""
        self.feat_mean.copy_(x.mean(0))
        self.feat_std.copy_(x.std(0, unbiased=False).clamp_min(1e-6))
        if lengths is not None:
            self.length_scale.copy_(lengths.float().std(unbiased=False).clamp_min(1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.feat_mean) / self.feat_std)

    def expected_length(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1) @ self.centers

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.expected_length(self(x))


def soft_label_loss(head: SoftLabelHead, logits: torch.Tensor, lengths: torch.Tensor, lam: float = 0.95,
                    censored: torch.Tensor | None = None) -> torch.Tensor:
    """``lam * CE(soft labels, softmax(logits)) + (1 - lam) * MSE(y / s, y_hat / s)``, ``s`` the length scale.

    ``censored`` (bool [B], optional) marks rows whose ``lengths`` is the cap they hit: their CE is ``-log`` of
    the probability mass in the cap's bin and above, their MSE ``relu(cap - y_hat)^2 / s^2`` (module docstring).
    """
    if censored is None or not bool(censored.any()):
        target = soft_labels(head.bins.index(lengths), head.bins.k)
        ce = -(target * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        return lam * ce + (1 - lam) * normalized_mse(head, logits, lengths)
    censored = censored.to(torch.bool).reshape(-1)
    if censored.shape[0] != lengths.shape[0]:
        raise ValueError(f"censored has {censored.shape[0]} rows, lengths {lengths.shape[0]}")
    index = head.bins.index(lengths)
    log_p = torch.log_softmax(logits, dim=-1)
    finished_ce = -(soft_labels(index, head.bins.k) * log_p).sum(-1)
    tail = torch.arange(head.bins.k, device=logits.device)[None, :] >= index.to(logits.device)[:, None]
    censored_ce = -torch.logsumexp(log_p.masked_fill(~tail, float("-inf")), dim=-1)
    ce = torch.where(censored, censored_ce, finished_ce).mean()
    err = (head.expected_length(logits) - lengths.float()) / head.length_scale
    sq = torch.where(censored, torch.relu(-err), err) ** 2
    return lam * ce + (1 - lam) * sq.mean()


def normalized_mse(head: SoftLabelHead, logits: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The head's MSE term: squared error of the expected length in units of the training lengths' standard
    deviation (the constant-mean predictor scores 1)."""
    err = (head.expected_length(logits) - lengths.float()) / head.length_scale
    return (err ** 2).mean()


def bin_quantiles(probs: torch.Tensor, bins: LengthBins, levels: tuple[float, ...]) -> np.ndarray:
    """Quantiles [N, len(levels)] (tokens) of the length distributions ``probs`` [N, K] over ``bins``: the CDF is
    linear inside each bin between its edges; the open outer edges are closed at ``max(0, 2 c_1 - e_1)`` and
    ``2 c_K - e_{K-1}`` (each outer bin as wide on both sides of its centre as on its inner side)."""
    inner = bins.inner_edges.double()
    centers = bins.centers.double()
    edges = torch.cat([(2 * centers[:1] - inner[:1]).clamp_min(0), inner, 2 * centers[-1:] - inner[-1:]])
    cdf = torch.cat([torch.zeros(probs.shape[0], 1, dtype=torch.float64), probs.double().cumsum(-1)], dim=1)
    cdf[:, -1] = 1.0
    out = np.empty((probs.shape[0], len(levels)))
    for j, q in enumerate(levels):
        k = (torch.searchsorted(cdf, torch.full((probs.shape[0], 1), q, dtype=torch.float64)).squeeze(1) - 1)
        k = k.clamp(0, bins.k - 1)
        lo, hi = cdf.gather(1, k[:, None]).squeeze(1), cdf.gather(1, (k + 1)[:, None]).squeeze(1)
        share = ((q - lo) / (hi - lo).clamp_min(1e-12)).clamp(0, 1)
        out[:, j] = (edges[k] + share * (edges[k + 1] - edges[k])).numpy()
    return out
