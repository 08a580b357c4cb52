"""Attention-pooling length head: a run-level head with no entropy in its path.

The states ``h_t`` [T, d] of one run's pooled tokens (the user's content, at the chosen layer) are
standardised, ``x_t = (h_t - mu) / sigma`` (``mu``, ``sigma``: per-dimension statistics of the training tokens),
scored by the ``scorer``: ``linear``, ``s_t = v . x_t``, or ``mlp``, ``s_t = v . GELU(W x_t + b)`` (which can
represent entropy-like, non-linear functions of the state; no output bias, which softmax would ignore), pooled
as ``z = sum_t a_t h_t`` with ``a = softmax_t(s)``, and ``z`` goes through a :class:`SoftLabelHead`
(standardisation, K logits, expected bin centre, the same soft-label loss). ``v`` starts at zero, so an
untrained head of either scorer is the mean-pooling head. The weights ``a_t`` are learned from the
length loss alone: a correlation of ``a_t``, or of any gradient through this head, with token entropy is
evidence, not construction. Runs of different lengths are padded and masked (padded tokens get weight 0) for
prediction and attribution; training packs them instead (:func:`pack_runs`, :meth:`AttentionPoolingHead.packed`),
the same arithmetic without the padding, which is most of a random batch of study prompts (6.1x their tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from lenscope.analysis.core.soft_label_head import LengthBins, SoftLabelHead, soft_label_loss
from lenscope.analysis.core.training import fit_minibatch
from lenscope.analysis.egtp.training import HeadConfig, TrainResult, fit_bins


def pad_runs(runs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs [T_i, d] -> zero-padded states [B, max T, d] and their mask [B, max T] (True = a real token)."""
    if not runs or any(len(r) == 0 for r in runs):
        raise ValueError("need at least one run, each with at least one token")
    mask = pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in runs], batch_first=True)
    return pad_sequence(list(runs), batch_first=True), mask


def pack_runs(runs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs [T_i, d] -> their tokens one after another [sum T_i, d] and each token's run index [sum T_i]."""
    if not runs or any(len(r) == 0 for r in runs):
        raise ValueError("need at least one run, each with at least one token")
    sizes = torch.tensor([len(r) for r in runs])
    return torch.cat(list(runs)), torch.repeat_interleave(torch.arange(len(runs)), sizes)


SCORERS = ("linear", "mlp")


class AttentionPoolingHead(nn.Module):
    """``softmax_t(score(standardised h_t))``-weighted sum of the token states, then a :class:`SoftLabelHead`."""

    def __init__(self, in_dim: int, bins: LengthBins, hidden: int = 256, dropout: float = 0.1,
                 architecture: str = "mlp", scorer: str = "linear", scorer_hidden: int = 64) -> None:
        super().__init__()
        if scorer not in SCORERS:
            raise ValueError(f"scorer must be one of {SCORERS}, not {scorer!r}")
        self.register_buffer("token_mean", torch.zeros(in_dim))
        self.register_buffer("token_std", torch.ones(in_dim))
        last = nn.Linear(in_dim if scorer == "linear" else scorer_hidden, 1, bias=False)
        nn.init.zeros_(last.weight)
        self.score = last if scorer == "linear" else nn.Sequential(nn.Linear(in_dim, scorer_hidden), nn.GELU(), last)
        self.output = SoftLabelHead(in_dim, bins, hidden, dropout, architecture)

    def fit_scaler(self, runs: Sequence[torch.Tensor], lengths: torch.Tensor) -> None:
        """Token statistics for the score, and the output head's scaler from the runs' mean-pooled states (the
        pooling of the untrained head)."""
        tokens = torch.cat(list(runs)).to(self.token_mean.dtype)
        self.token_mean.copy_(tokens.mean(0))
        self.token_std.copy_(tokens.std(0, unbiased=False).clamp_min(1e-6))
        self.output.fit_scaler(torch.stack([r.to(tokens.dtype).mean(0) for r in runs]), lengths)

    def weights(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attention weights ``a`` [B, T] of states [B, T, d] (0 where ``mask`` is False)."""
        scores = self.score((states - self.token_mean) / self.token_std).squeeze(-1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def forward(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Bin logits [B, K] of states [B, T, d]."""
        pooled = (self.weights(states, mask)[..., None] * states).sum(1)
        return self.output(pooled)

    def packed(self, tokens: torch.Tensor, run_of: torch.Tensor) -> torch.Tensor:
        """Bin logits [B, K] of runs packed by :func:`pack_runs`: :meth:`forward` without padding (a softmax
        within each run, shifted by the run's largest score, then a weighted sum per run)."""
        n = int(run_of[-1]) + 1
        scores = self.score((tokens - self.token_mean) / self.token_std).squeeze(-1)
        top = scores.new_full((n,), float("-inf")).scatter_reduce(0, run_of, scores.detach(), "amax")
        e = torch.exp(scores - top[run_of])
        weights = e / e.new_zeros(n).index_add(0, run_of, e)[run_of]
        pooled = tokens.new_zeros(n, tokens.shape[1]).index_add(0, run_of, weights[:, None] * tokens)
        return self.output(pooled)

    def predict(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted lengths [B] (tokens)."""
        return self.output.expected_length(self(states, mask))


def predict_runs(head: AttentionPoolingHead, runs: Sequence[torch.Tensor], batch: int = 64) -> torch.Tensor:
    """Predicted lengths [N] of runs [T_i, d]."""
    head.eval()
    with torch.no_grad():
        return torch.cat([head.predict(*pad_runs([r.float() for r in runs[i:i + batch]]))
                          for i in range(0, len(runs), batch)])


def train_attention_head(runs: Sequence[torch.Tensor], lengths: torch.Tensor,
                         val_runs: Sequence[torch.Tensor] = (), val_lengths: torch.Tensor | None = None,
                         config: HeadConfig | None = None,
                         on_epoch: Callable[[int, int, dict], None] | None = None,
                         scorer: str = "linear") -> TrainResult:
    """Fit an :class:`AttentionPoolingHead` with ``scorer`` on runs [T_i, d] -> lengths [N] with the soft-label
    loss and the shared minibatch loop (:func:`lenscope.analysis.core.training.fit_minibatch`: AdamW, the epoch with the
    lowest validation MAE kept, the last one without validation runs)."""
    if not len(runs):
        raise ValueError("no training runs for the attention-pooling head")
    cfg = config or HeadConfig()
    torch.manual_seed(cfg.seed)
    runs, y = [r.float() for r in runs], lengths.float()
    head = AttentionPoolingHead(runs[0].shape[1], fit_bins(cfg, y), cfg.hidden, cfg.dropout, cfg.architecture,
                                scorer)
    head.fit_scaler(runs, y)

    def loss(model: nn.Module, idx: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return soft_label_loss(model.output, model.packed(*pack_runs([runs[i] for i in idx])), yb, cfg.lam)

    val_score = None
    if len(val_runs) and val_lengths is not None:
        def val_score(model: nn.Module) -> float:
            return float((predict_runs(model, val_runs) - val_lengths.float()).abs().mean())

    best_epoch, history = fit_minibatch(head, torch.arange(len(runs)), y, loss, cfg, val_score, on_epoch)
    for row in history:
        if "val" in row:
            row["val_mae"] = row.pop("val")
    return TrainResult(head, best_epoch, history)
