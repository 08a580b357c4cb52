"""TRAIL-style baseline: the OUTLETS :class:`~lenscope.analysis.drafter.probes.LengthProbe` in classification mode
(TRAIL predicts length bins) on the mean of the target's prompt hidden states at one intermediate layer. The jobs read
those means from the EGTP feature cache (``prompt.mean`` of ``lenscope.jobs.egtp.heads.run_features``)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from lenscope.analysis.drafter.probes import LengthProbe, ProbeConfig, train_probe


def train_trail(x: torch.Tensor, lengths: torch.Tensor, layer: int, epochs: int = 60, lr: float = 1e-3,
                batch_size: int = 16, seed: int = 42, hidden: int = 256,
                on_epoch: Callable[[int, float], None] | None = None) -> LengthProbe:
    """Binned MLP probe from mean-pooled prompt states [N, d] of ``layer`` to output lengths."""
    config = ProbeConfig(in_dim=x.shape[1], layer=layer, mode="classification", hidden=hidden)
    return train_probe(x, lengths, config, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed, on_epoch=on_epoch)
