"""Summaries of next-token distributions: entropy (nats) and the top-k candidates."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LogitSummary:
    """Per-position next-token entropy and top-k probabilities, shape ``[T]`` and ``[T, k]``."""

    entropy: torch.Tensor
    topk_ids: torch.Tensor
    topk_probs: torch.Tensor


def summarize_logits(logits: torch.Tensor, k: int = 5) -> LogitSummary:
    """Entropy H = -sum p log p of softmax(logits) along the last axis, and its top-k entries."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).sum(-1)
    top = probs.topk(k, dim=-1)
    return LogitSummary(entropy=entropy, topk_ids=top.indices, topk_probs=top.values)
