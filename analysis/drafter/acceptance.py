"""Speculative-decoding acceptance of live verify cycles: how many drafts each draft position evaluated and
accepted (a position is evaluated only when every earlier draft of its cycle was accepted)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

DRAFT_STEPS = 5  # drafting horizon k of the acceptance evaluations (replayed and live)


def cycle_acceptance(accepted: Sequence[int], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per draft position 1..k of live verify cycles that accepted ``accepted[c]`` drafts each: how many drafts
    were evaluated (every earlier one accepted) and how many of those were accepted."""
    counts = torch.as_tensor(list(accepted), dtype=torch.long).view(-1, 1)
    positions = torch.arange(k).view(1, -1)
    return (positions <= counts).sum(0), (positions < counts).sum(0)
