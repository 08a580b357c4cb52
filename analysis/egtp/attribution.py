"""Gradient attribution of a length head to tokens, and its correlation with token entropy.

Importance of token ``t`` is ``I_t = || d L_MSE / d h_t ||_2`` where ``L_MSE`` is the head's
normalised MSE term (:func:`lenscope.analysis.core.soft_label_head.normalized_mse`) for the run's true length and
``h_t`` is token ``t``'s hidden state at the attribution layer. Gradients come from captum
(``Saliency(abs=False)`` / ``LayerGradientXActivation(multiply_by_inputs=False)``), then the L2 norm
over the hidden dimension.

Two paths, and why both exist:

* **pooling path** (attribution layer = head layer, :func:`pooled_importance`): the gradient only flows
  through the pooling, so ``I_t = w_t * ||dL/dh||``. With EGTP pooling ``w_t = softmax(H/alpha)_t``,
  which makes importance a monotone function of entropy *by construction* within a run; with mean
  pooling ``I_t`` is the same for every token of a run. Neither tests the paper's claim.
* **model path** (attribution layer below the head layer, :func:`model_importance`): the gradient
  flows from the head, through the pooling of the head-layer states, back through the target's own
  decoder layers to the attribution layer, where tokens interact through attention. With a
  **mean-pooling head** no entropy enters the gradient path: this is the fair test of "high-entropy
  tokens matter most for length". Entropies are held fixed (not differentiated) in the EGTP weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from captum.attr import LayerGradientXActivation, Saliency

from lenscope.analysis.core.metrics import bootstrap_correlation
from lenscope.analysis.core.soft_label_head import SoftLabelHead, normalized_mse
from lenscope.analysis.egtp.pooling import pool


def head_loss_fn(head: SoftLabelHead, entropy: torch.Tensor, true_length: float, pooling: str = "egtp",
                 alpha: float = 1.0) -> Callable[[torch.Tensor], torch.Tensor]:
    """``states [B, T, d] -> per-example normalised MSE [B]`` of the pooled states through ``head``."""
    head.eval()
    y = torch.tensor([float(true_length)])
    ent = entropy.detach().float()

    def loss(states: torch.Tensor) -> torch.Tensor:
        logits = head(torch.stack([pool(s, ent, pooling, alpha) for s in states]))
        return torch.stack([normalized_mse(head, row[None], y) for row in logits])

    return loss


def pooled_importance(head: SoftLabelHead, hidden: torch.Tensor, entropy: torch.Tensor, true_length: float,
                      pooling: str = "egtp", alpha: float = 1.0) -> torch.Tensor:
    """Pooling path: ``||dL/dh_t||_2`` for states ``hidden [T, d]`` at the head's own layer ([T])."""
    states = hidden.detach()[None].clone().requires_grad_(True)
    grads = Saliency(head_loss_fn(head, entropy, true_length, pooling, alpha)).attribute(states, abs=False)
    return grads[0].norm(dim=-1).detach()


def layer_module(model: torch.nn.Module, layer: int) -> torch.nn.Module:
    """The module whose output is hidden state ``layer`` (0 = embeddings, last = final norm) of an HF
    decoder-only model with ``model.model.{embed_tokens, layers, norm}``."""
    base = model.model
    n = len(base.layers)
    if not 0 <= layer <= n:
        raise ValueError(f"layer {layer} is outside 0..{n}")
    return base.embed_tokens if layer == 0 else base.norm if layer == n else base.layers[layer - 1]


def model_importance(model: torch.nn.Module, input_ids: torch.Tensor, head: SoftLabelHead, entropy: torch.Tensor,
                     true_length: float, head_layer: int, attr_layer: int, pooling: str = "mean",
                     alpha: float = 1.0, span: int | None = None, start: int = 0) -> torch.Tensor:
    """Model path: ``||dL/dh_t||_2`` at ``attr_layer`` for every token of ``input_ids`` ([T]), the loss
    computed from the pooled ``head_layer`` states of tokens ``start..span`` (default: all)."""
    if attr_layer >= head_layer:
        raise ValueError(f"the attribution layer ({attr_layer}) must lie below the head layer ({head_layer}); "
                         "use pooled_importance for the head's own layer")
    span = len(input_ids) if span is None else span
    loss = head_loss_fn(head, entropy[start:span], true_length, pooling, alpha)
    device = next(model.parameters()).device

    def forward(ids: torch.Tensor) -> torch.Tensor:
        out = model.model(input_ids=ids, output_hidden_states=True)
        return loss(out.hidden_states[head_layer][:, start:span].float().cpu())

    attr = LayerGradientXActivation(forward, layer_module(model, attr_layer), multiply_by_inputs=False)
    with torch.enable_grad():
        grads = attr.attribute(input_ids.long()[None].to(device))
    return grads[0].float().norm(dim=-1).detach().cpu()


@dataclass
class Correlation:
    """Pearson and Spearman correlation of entropy and importance over all tokens, with bootstrap CIs
    from resampling whole runs (tokens of one run are not independent)."""

    pearson: float
    pearson_ci: tuple[float, float]
    spearman: float
    spearman_ci: tuple[float, float]
    n_tokens: int
    n_runs: int
    level: float

    def as_dict(self) -> dict:
        return asdict(self)


def entropy_importance_correlation(runs: Sequence[tuple[np.ndarray, np.ndarray]], n_boot: int = 1000,
                                   level: float = 0.95, seed: int = 0) -> Correlation:
    """Correlations over the pooled tokens of ``runs`` = [(entropy [T], importance [T]), ...]; Spearman is the
    Pearson r of the pooled ranks (:func:`lenscope.analysis.core.metrics.bootstrap_correlation` for the CIs)."""
    from scipy.stats import rankdata

    runs = [(np.asarray(h, float), np.asarray(i, float)) for h, i in runs if len(h)]
    if not runs:
        raise ValueError("no tokens to correlate")
    h = np.concatenate([r[0] for r in runs])
    imp = np.concatenate([r[1] for r in runs])
    groups = np.repeat(np.arange(len(runs)), [len(r[0]) for r in runs])
    p = bootstrap_correlation(h, imp, groups, n_boot, level, seed)
    s = bootstrap_correlation(rankdata(h), rankdata(imp), groups, n_boot, level, seed)
    return Correlation(p.value, (p.lo, p.hi), s.value, (s.lo, s.hi), int(len(h)), len(runs), level)
