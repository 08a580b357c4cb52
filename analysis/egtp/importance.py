"""Per-token importance measures of a run-level length head, the inputs of the entropy-attribution test.

``L(h)`` is the head's normalised MSE (:func:`lenscope.analysis.core.soft_label_head.normalized_mse`) for the run's true
length, ``h`` [T, d] the states the head reads (the run's pooled tokens at the head's layer), and
``g_t = dL/dh_t`` (captum ``Saliency(abs=False)``):

* ``gradient``: ``||g_t||_2``, the paper's ``I_t``;
* ``grad_x_act``: ``|<g_t, h_t>|`` (summed over the hidden dimension, then the absolute value) = ``|dL/de|`` at
  ``e = 0`` when token ``t``'s state is scaled by ``1 + e``: first-order, and free of the raw activation size
  that dominates ``||g_t||`` when ``h_t`` is large;
* ``integrated_gradients``: ``|sum_d IG_{t,d}|`` with captum ``IntegratedGradients`` from the all-zeros
  baseline (every token's state zero at once), ``IG_{t,d} = h_{t,d} int_0^1 dL/dh_{t,d}(a h) da``; the signed
  token sums add up to ``L(h) - L(0)`` (completeness);
* ``attention``: the learned pooling weight ``a_t`` (attention-pooling heads only).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from captum.attr import IntegratedGradients, Saliency

from lenscope.analysis.core.soft_label_head import SoftLabelHead, normalized_mse
from lenscope.analysis.egtp.attention_head import AttentionPoolingHead
from lenscope.analysis.egtp.attribution import head_loss_fn

MEASURES = ("gradient", "grad_x_act", "integrated_gradients", "attention")

LossFn = Callable[[torch.Tensor], torch.Tensor]


def attention_loss_fn(head: AttentionPoolingHead, true_length: float) -> LossFn:
    """``states [B, T, d] -> per-example normalised MSE [B]`` of ``head`` for the run's true length."""
    head.eval()
    y = torch.tensor([float(true_length)])

    def loss(states: torch.Tensor) -> torch.Tensor:
        return torch.stack([normalized_mse(head.output, row[None], y) for row in head(states)])

    return loss


def token_importances(loss_fn: LossFn, hidden: torch.Tensor, ig_steps: int = 32) -> dict[str, np.ndarray]:
    """``gradient``, ``grad_x_act`` and ``integrated_gradients`` [T] of ``loss_fn`` at states ``hidden`` [T, d]."""
    states = hidden.detach()[None].clone().requires_grad_(True)
    with torch.enable_grad():
        grad = Saliency(loss_fn).attribute(states, abs=False)[0].detach()
        ig = IntegratedGradients(loss_fn).attribute(states, baselines=torch.zeros_like(states),
                                                    n_steps=ig_steps)[0].detach()
    h = hidden.detach()
    return {"gradient": grad.norm(dim=-1).numpy(), "grad_x_act": (grad * h).sum(-1).abs().numpy(),
            "integrated_gradients": ig.sum(-1).abs().numpy()}


def head_importances(head: AttentionPoolingHead | SoftLabelHead, hidden: torch.Tensor, entropy: torch.Tensor,
                     true_length: float, pooling: str = "mean", alpha: float = 1.0,
                     ig_steps: int = 32) -> dict[str, np.ndarray]:
    """Every measure of :data:`MEASURES` that ``head`` has, for states ``hidden`` [T, d] at the head's input.

    An :class:`AttentionPoolingHead` ignores ``entropy`` and adds ``attention``; a :class:`SoftLabelHead` reads
    ``pool(hidden, entropy, pooling, alpha)`` (entropy enters the path only for ``pooling="egtp"``, whose
    importance then follows the entropy weights by construction)."""
    dtype = next(head.parameters()).dtype
    hidden = hidden.detach().to(dtype)
    if isinstance(head, AttentionPoolingHead):
        out = token_importances(attention_loss_fn(head, true_length), hidden, ig_steps)
        with torch.no_grad():
            out["attention"] = head.weights(hidden[None])[0].numpy()
        return out
    return token_importances(head_loss_fn(head, entropy, true_length, pooling, alpha), hidden, ig_steps)
