"""Proxy-model baselines on prompt embeddings.

* SSJF-Reg: regression of ``log(1 + length)`` (the OUTLETS :class:`~lenscope.analysis.drafter.probes.LengthProbe`,
  regression mode, on encoder embeddings instead of target states).
* SSJF-MC: multi-class classification over ``K`` log-spaced length bins (the EGTP
  :class:`~lenscope.analysis.core.soft_label_head.SoftLabelHead` network trained with hard labels); the prediction is
  the centre of the most likely bin.
* S3: the same classifier over ``K`` equal-width buckets ``[0, max/K), [max/K, 2 max/K) ...`` (S3's
  buckets); the prediction is the bucket's mean training length, not S3's upper bound, so that MAE compares
  like with like.

Bin centres are the mean training length of the bin (the geometric/arithmetic midpoint when empty).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from lenscope.analysis.core.soft_label_head import LengthBins, SoftLabelHead, log_bins
from lenscope.analysis.core.training import fit_minibatch
from lenscope.analysis.drafter.probes import LengthProbe, ProbeConfig, train_probe
from lenscope.analysis.egtp.training import HeadConfig

ENCODER_LAYER = -1  # ProbeConfig.layer of probes that read encoder embeddings, not a target layer


def train_regressor(x: torch.Tensor, lengths: torch.Tensor, epochs: int = 60, lr: float = 1e-3,
                    batch_size: int = 16, seed: int = 42, hidden: int = 256,
                    on_epoch: Callable[[int, float], None] | None = None) -> LengthProbe:
    """SSJF-Reg: an MLP regressing log1p(length) from embeddings [N, d]."""
    config = ProbeConfig(in_dim=x.shape[1], layer=ENCODER_LAYER, mode="regression", hidden=hidden)
    return train_probe(x, lengths, config, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed,
                       on_epoch=on_epoch)


def equal_width_bins(lengths, k: int = 10) -> LengthBins:
    """S3 buckets: ``k`` equal-width bins over ``[0, max length]``."""
    y = np.asarray(lengths, dtype=np.float64)
    if y.size == 0 or k < 2:
        raise ValueError("need training lengths and at least 2 buckets")
    edges = np.linspace(0.0, max(y.max(), 1.0), k + 1)
    inner = torch.tensor(edges[1:-1], dtype=torch.float32)
    idx = torch.bucketize(torch.tensor(y, dtype=torch.float32), inner, right=True).numpy()
    centers = np.array([y[idx == j].mean() if (idx == j).any() else (edges[j] + edges[j + 1]) / 2
                        for j in range(k)])
    return LengthBins(inner, torch.tensor(centers, dtype=torch.float32))


BUCKET_SCHEMES = {"log": log_bins, "equal": equal_width_bins}


def bucket_predict(head: SoftLabelHead, x: torch.Tensor) -> np.ndarray:
    """Centre of the most likely bin for each row of ``x``."""
    head.eval()
    with torch.no_grad():
        return head.centers[head(x.float()).argmax(-1)].numpy()


def train_bucket_classifier(x: torch.Tensor, lengths: torch.Tensor, scheme: str = "log", k: int = 10,
                            config: HeadConfig | None = None, x_val: torch.Tensor | None = None,
                            y_val: torch.Tensor | None = None,
                            on_epoch: Callable[[int, int, dict], None] | None = None) -> SoftLabelHead:
    """SSJF-MC (``scheme="log"``) or S3 (``scheme="equal"``): hard-label cross-entropy over ``k`` bins fitted
    to the training lengths; the epoch with the lowest validation MAE is kept."""
    if scheme not in BUCKET_SCHEMES:
        raise ValueError(f"unknown bucket scheme {scheme!r}; choose from {sorted(BUCKET_SCHEMES)}")
    cfg = config or HeadConfig()
    x, lengths = x.float(), lengths.float()
    bins = BUCKET_SCHEMES[scheme](lengths.numpy(), k)
    torch.manual_seed(cfg.seed)
    head = SoftLabelHead(x.shape[1], bins, cfg.hidden, cfg.dropout)
    head.fit_scaler(x, lengths)
    labels = bins.index(lengths)

    def loss(model: SoftLabelHead, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(xb), yb)

    val = None
    if x_val is not None and y_val is not None and len(x_val):
        def val(model: SoftLabelHead) -> float:
            return float(np.abs(bucket_predict(model, x_val) - y_val.float().numpy()).mean())

    fit_minibatch(head, x, labels, loss, cfg, val, on_epoch)
    return head
