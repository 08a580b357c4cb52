"""Learning-to-rank baseline (LTR): a scorer trained only to *order* prompts by output length, with a
listwise (ListMLE) or pairwise (RankNet logistic) loss on prompt embeddings; higher score = longer answer.

Scores become lengths by quantile matching on the training set: a score at quantile ``q`` of the training
scores maps to quantile ``q`` of the training lengths (a monotone piecewise-linear map), so
the mapping never changes the ranking, and Kendall's tau measures the scorer alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lenscope.analysis.baselines.proxy import ENCODER_LAYER
from lenscope.analysis.core.training import fit_minibatch
from lenscope.analysis.drafter.probes import LengthProbe, ProbeConfig
from lenscope.analysis.egtp.training import HeadConfig
from lenscope.models.atomic_files import write_text
from lenscope.models.drafter import feature_statistics

RANK_LOSSES = ("listmle", "pairwise")
CALIBRATION_FILE = "calibration.json"


def listmle_loss(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """ListMLE: negative log-likelihood of the true order (longest first) under a Plackett-Luce model."""
    s = scores[torch.argsort(lengths, descending=True)]
    tail_lse = torch.logcumsumexp(s.flip(0), dim=0).flip(0)
    return (tail_lse - s).mean()


def pairwise_loss(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """RankNet: logistic loss ``log(1 + exp(-(s_i - s_j)))`` over all pairs with ``len_i > len_j``."""
    longer = lengths[:, None] > lengths[None, :]
    if not longer.any():
        return scores.sum() * 0.0
    diff = scores[:, None] - scores[None, :]
    return F.softplus(-diff[longer]).mean()


@dataclass
class QuantileMap:
    """Monotone map from ranking scores to lengths fitted on the training set (sorted scores and lengths)."""

    scores: np.ndarray
    lengths: np.ndarray

    @classmethod
    def fit(cls, scores, lengths) -> QuantileMap:
        s, y = np.sort(np.asarray(scores, dtype=float)), np.sort(np.asarray(lengths, dtype=float))
        if s.size == 0 or s.size != y.size:
            raise ValueError("need as many training scores as lengths, at least one")
        return cls(s, y)

    def __call__(self, scores) -> np.ndarray:
        return np.interp(np.asarray(scores, dtype=float), self.scores, self.lengths)

    def save(self, path: Path) -> Path:
        write_text(path, json.dumps({"scores": self.scores.tolist(), "lengths": self.lengths.tolist()}))
        return path

    @classmethod
    def load(cls, path: Path) -> QuantileMap:
        raw = json.loads(Path(path).read_text())
        return cls(np.array(raw["scores"]), np.array(raw["lengths"]))


def ranking_scores(scorer: LengthProbe, x: torch.Tensor) -> np.ndarray:
    scorer.eval()
    with torch.no_grad():
        return scorer(x.float()).numpy()


def train_ranker(x: torch.Tensor, lengths: torch.Tensor, loss: str = "listmle", config: HeadConfig | None = None,
                 x_val: torch.Tensor | None = None, y_val: torch.Tensor | None = None,
                 on_epoch: Callable[[int, int, dict], None] | None = None) -> tuple[LengthProbe, QuantileMap]:
    """Train a scorer (standardised MLP -> scalar) with a ranking loss over minibatch lists, keep the epoch
    with the best validation Kendall tau, and fit the score -> length quantile map on the training set."""
    from scipy.stats import kendalltau

    if loss not in RANK_LOSSES:
        raise ValueError(f"unknown ranking loss {loss!r}; choose from {RANK_LOSSES}")
    cfg = config or HeadConfig(batch_size=32)
    x, lengths = x.float(), lengths.float()
    torch.manual_seed(cfg.seed)
    scorer = LengthProbe(ProbeConfig(in_dim=x.shape[1], layer=ENCODER_LAYER, mode="regression", hidden=cfg.hidden))
    mean, std = feature_statistics(x)
    scorer.mean.copy_(mean)
    scorer.std.copy_(std)
    rank_loss = listmle_loss if loss == "listmle" else pairwise_loss

    def batch_loss(model: LengthProbe, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return rank_loss(model(xb), yb)

    val = None
    if x_val is not None and y_val is not None and len(x_val) > 1:
        def val(model: LengthProbe) -> float:
            tau = kendalltau(ranking_scores(model, x_val), y_val.numpy()).statistic
            return -float(np.nan_to_num(tau))

    fit_minibatch(scorer, x, lengths, batch_loss, cfg, val, on_epoch)
    return scorer, QuantileMap.fit(ranking_scores(scorer, x), lengths.numpy())
